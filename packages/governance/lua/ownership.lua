--[[
sluice partition ownership script, protocol 1: compare-and-act on the owner of one event
partition and on the registry of live aggregators. Taking a free partition is a plain SET NX PX
and does not go through this script. Time is Redis' (TIME), never the caller's.

KEYS (one hash tag per call, so the script runs on one Redis Cluster slot):
  renew, release: [1] the partition's owner key (`...:lease`, a suffix kept from 0.1), a STRING holding the owner id, with a TTL
  save:           [1] the owner key, [2] the partition's snapshot, a STRING (same hash tag)
  members, leave: [1] the registry of live aggregators, a ZSET of owner ids scored by expiry (ms)

ARGV:
  [1] protocol version, "1"
  [2] the operation: "renew", "release", "save", "members" or "leave"
  [3] the owner id (1..128 characters)
  [4] renew, save, members: the TTL in ms (an integer >= 1); release, leave: unused
  [5] save: the snapshot bytes

Returns 1 when done, 0 when the partition is not (or no longer) held by the owner (renew,
release, save); for members and leave, the number of live aggregators; -1 for malformed
arguments.
]]

if ARGV[1] ~= '1' then return -1 end
local op = ARGV[2]
local owner = ARGV[3]
if not owner or string.len(owner) < 1 or string.len(owner) > 128 then return -1 end
local ttl = tonumber(ARGV[4])
local needs_ttl = op == 'renew' or op == 'save' or op == 'members'
if needs_ttl and (not ttl or ttl < 1 or ttl ~= math.floor(ttl)) then return -1 end

if op == 'renew' then
  if redis.call('GET', KEYS[1]) ~= owner then return 0 end
  redis.call('PEXPIRE', KEYS[1], ttl)
  return 1
elseif op == 'release' then
  if redis.call('GET', KEYS[1]) ~= owner then return 0 end
  redis.call('DEL', KEYS[1])
  return 1
elseif op == 'save' then
  -- Only the owner writes: an aggregator that lost the partition cannot overwrite its successor's state.
  if redis.call('GET', KEYS[1]) ~= owner then return 0 end
  redis.call('SET', KEYS[2], ARGV[5], 'PX', ttl)
  return 1
elseif op == 'members' or op == 'leave' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if op == 'members' then
    redis.call('ZADD', KEYS[1], now + ttl, owner)
    redis.call('PEXPIRE', KEYS[1], ttl * 10)
  else
    redis.call('ZREM', KEYS[1], owner)
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  return redis.call('ZCARD', KEYS[1])
end
return -1
