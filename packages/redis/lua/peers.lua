-- Heartbeat of one client in the registry of live clients, and the count of live clients.
-- Time is Redis TIME, so clients' clocks never matter. Defines peers(KEYS, ARGV), loaded like
-- batch.lua (a function library, or a script on servers without functions).
--
-- KEYS[1]  the registry: a sorted set of client ids scored by their last heartbeat (ms)
-- ARGV[1]  this client's id ('' to only count)
-- ARGV[2]  how long a client counts as live after its last heartbeat, in ms
-- ARGV[3]  'leave' to remove this client instead of refreshing it
--
-- Returns the number of live clients (after this heartbeat).
local function peers(keys, argv)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local ttl = tonumber(argv[2])
  if argv[3] == 'leave' then
    redis.call('ZREM', keys[1], argv[1])
  elseif argv[1] ~= '' then
    redis.call('ZADD', keys[1], now, argv[1])
  end
  redis.call('ZREMRANGEBYSCORE', keys[1], '-inf', now - ttl)
  redis.call('PEXPIRE', keys[1], ttl * 2)
  return redis.call('ZCARD', keys[1])
end
