--[[
sluice adaptive limits, protocol 1: the fleet's demand counts of one adaptive resource, and its
decider (at most one server judges and moves a resource's limit at a time). The decider's id
sits in a STRING key with a TTL; the holder keeps it by calling again well within the TTL, and
a holder that stops calling (it died) loses it when the TTL ends, so another server takes over.

KEYS (one resource's keys share a hash tag, so a call runs on one Redis Cluster slot):
  lead, resign: [1] the resource's decider key (`<prefix>{adapt:<resource>}:lead`), a STRING
  add:          [1] one interval's counts (`<prefix>{adapt:<resource>}:d:<interval>:<start>`),
                a HASH of d (decided), r (rejected), p (peak share in use), w (waits), wm (waited ms)

ARGV:
  [1] protocol version, "1"
  [2] the operation: "lead" (take the decider key when free, or extend it when the caller holds
      it), "resign" (delete it when the caller holds it) or "add" (add counts to an interval)
  lead, resign: [3] the caller's id (1..128 characters); [4] lead: the TTL in ms (integer >= 1)
  add: [3] decided, [4] rejected, [5] waits (integers >= 0), [6] waited ms (number >= 0),
       [7] peak share (0..1, kept when higher than the stored one), [8] TTL in ms (integer >= 1)

Returns 1 when done (lead: the caller holds the key; resign: it was given up; add: added),
0 when another holds the key (lead) or the caller did not (resign), -1 for malformed arguments.
]]

if ARGV[1] ~= '1' then return -1 end
local op = ARGV[2]

local function int(s)
  local n = tonumber(s)
  if not n or n < 0 or n ~= math.floor(n) then return nil end
  return n
end

if op == 'add' then
  local decided, rejected, waits = int(ARGV[3]), int(ARGV[4]), int(ARGV[5])
  local waited, peak, ttl = tonumber(ARGV[6]), tonumber(ARGV[7]), int(ARGV[8])
  if not decided or not rejected or not waits or not waited or waited < 0 or not peak or peak < 0 or peak > 1
    or not ttl or ttl < 1 then
    return -1
  end
  local key = KEYS[1]
  redis.call('HINCRBY', key, 'd', decided)
  redis.call('HINCRBY', key, 'r', rejected)
  redis.call('HINCRBY', key, 'w', waits)
  redis.call('HINCRBYFLOAT', key, 'wm', ARGV[6])
  local before = tonumber(redis.call('HGET', key, 'p') or '0')
  if peak > before or redis.call('HEXISTS', key, 'p') == 0 then redis.call('HSET', key, 'p', ARGV[7]) end
  redis.call('PEXPIRE', key, ttl)
  return 1
end

local owner = ARGV[3]
if not owner or string.len(owner) < 1 or string.len(owner) > 128 then return -1 end
local holder = redis.call('GET', KEYS[1])
if op == 'lead' then
  local ttl = int(ARGV[4])
  if not ttl or ttl < 1 then return -1 end
  if holder and holder ~= owner then return 0 end
  redis.call('SET', KEYS[1], owner, 'PX', ttl)
  return 1
elseif op == 'resign' then
  if holder ~= owner then return 0 end
  redis.call('DEL', KEYS[1])
  return 1
end
return -1
