-- Heartbeat of one client in the registry of live clients, and the count of live clients.
-- Time is Redis TIME, so clients' clocks never matter.
--
-- KEYS[1]  the registry: a sorted set of client ids scored by their last heartbeat (ms)
-- ARGV[1]  this client's id ('' to only count)
-- ARGV[2]  how long a client counts as live after its last heartbeat, in ms
-- ARGV[3]  'leave' to remove this client instead of refreshing it
--
-- Returns the number of live clients (after this heartbeat).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
if ARGV[3] == 'leave' then
  redis.call('ZREM', KEYS[1], ARGV[1])
elseif ARGV[1] ~= '' then
  redis.call('ZADD', KEYS[1], now, ARGV[1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
redis.call('PEXPIRE', KEYS[1], ttl * 2)
return redis.call('ZCARD', KEYS[1])
