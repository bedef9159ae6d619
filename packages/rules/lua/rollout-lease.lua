--[[
sluice rollout lease script, protocol 1: takes the decider's lease if it is free, or renews it
for its holder. One decider at a time advances a rollout and judges it.

KEYS:
  [1] lease  STRING: the holder's id, expiring after the lease's time

ARGV:
  [1] protocol version, "1"
  [2] the caller's id
  [3] the lease's time in ms ("0": give the lease up if the caller holds it)

Returns 1 when the caller holds the lease afterwards, else 0.
]]

if ARGV[1] ~= '1' then
  return redis.error_reply('sluice rollout-lease: protocol ' .. tostring(ARGV[1]) .. ', this script speaks 1')
end
local holder = redis.call('GET', KEYS[1])
if ARGV[3] == '0' then
  if holder == ARGV[2] then redis.call('DEL', KEYS[1]) end
  return 0
end
if holder == ARGV[2] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
if holder then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
