--[[
sluice rollout write script, protocol 1: replaces the rollout state if its revision is still
the expected one (compare-and-set), so two servers or operators never both win a change.

KEYS:
  [1] rollout  HASH: revision -> the state's revision, state -> the state as JSON

ARGV:
  [1] protocol version, "1"
  [2] the expected revision ("0": no rollout stored yet)
  [3] the new state as JSON (its revision already the expected one + 1)

Returns {0} when written; {1, revision} when the stored revision is another (nothing written).
]]

if ARGV[1] ~= '1' then
  return redis.error_reply('sluice rollout-write: protocol ' .. tostring(ARGV[1]) .. ', this script speaks 1')
end
local stored = tonumber(redis.call('HGET', KEYS[1], 'revision') or '0')
if stored ~= tonumber(ARGV[2]) then
  return {1, stored}
end
redis.call('HSET', KEYS[1], 'revision', tonumber(ARGV[2]) + 1, 'state', ARGV[3])
return {0}
