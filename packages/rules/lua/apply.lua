--[[
sluice rules apply script, protocol 1: records rule text as the next version and makes it
current, atomically, then announces it. Time is Redis' (TIME), never the caller's.

KEYS (all under one hash tag, so the script runs on one Redis Cluster slot):
  [1] seq      STRING: the last version number given out
  [2] current  STRING: the current version number
  [3] meta     HASH: version -> its record, a JSON object (see ARGV[3])
  [4] source   HASH: version -> its rule text
  [5] index    ZSET: version -> version (as score), for history and pruning

ARGV:
  [1] protocol version, "1"
  [2] the expected current version: "" to apply whatever is current, "0" to apply only
      if there is no version yet, else a version number
  [3] the version's record as a JSON object without "version" and "createdAtMs" (author,
      reason, hash, file, rolledBackFrom): non-empty, starting with "{"
  [4] the rule text
  [5] how many versions to keep (an integer >= 1); older ones are deleted
  [6] the channel to publish the new version number on

Returns {0, version, created_at_ms} when recorded;
        {1, current} when the current version is not the expected one (nothing recorded);
        {2, message} when the arguments are malformed (nothing recorded).
]]

local rcall = redis.call

if ARGV[1] ~= '1' then
  return {2, 'protocol ' .. tostring(ARGV[1]) .. ', this script speaks 1'}
end
local record = ARGV[3]
if string.sub(record, 1, 1) ~= '{' or string.len(record) < 3 then
  return {2, 'the record must be a non-empty JSON object'}
end
local keep = tonumber(ARGV[5])
if not keep or keep < 1 or keep ~= math.floor(keep) then
  return {2, 'versions to keep must be an integer >= 1'}
end

local current = tonumber(rcall('GET', KEYS[2]) or '0')
if ARGV[2] ~= '' and tonumber(ARGV[2]) ~= current then
  return {1, current}
end

local version = rcall('INCR', KEYS[1])
local t = rcall('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local v = string.format('%d', version)

-- The record gains its number and time in front of the caller's fields.
rcall('HSET', KEYS[3], v, '{"version":' .. v .. ',"createdAtMs":' .. string.format('%.17g', now) .. ',' .. string.sub(record, 2))
rcall('HSET', KEYS[4], v, ARGV[4])
rcall('ZADD', KEYS[5], version, v)
rcall('SET', KEYS[2], v)

-- Pruned in chunks: unpack() is bounded by Lua's C stack.
local excess = rcall('ZCARD', KEYS[5]) - keep
while excess > 0 do
  local old = rcall('ZRANGE', KEYS[5], 0, math.min(excess, 500) - 1)
  rcall('HDEL', KEYS[3], unpack(old))
  rcall('HDEL', KEYS[4], unpack(old))
  rcall('ZREM', KEYS[5], unpack(old))
  excess = excess - #old
end

rcall('PUBLISH', ARGV[6], v)
return {0, version, now}
