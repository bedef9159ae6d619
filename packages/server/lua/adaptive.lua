--[[
sluice adaptive limits, protocol 2: adds one server's demand counts of one adaptive resource to
an interval the fleet shares. (The resource's decider holds a leadership of its own, taken with
@sluice/redis' lua/leadership.lua.)

KEYS:
  [1] one interval's counts (`<prefix>{adapt:<resource>}:d:<interval>:<start>`), a HASH of
      d (decided), r (rejected), p (peak share in use), w (waits), wm (waited ms)

ARGV:
  [1] protocol version, "2"
  [2] decided, [3] rejected, [4] waits (integers >= 0), [5] waited ms (number >= 0),
  [6] peak share (0..1, kept when higher than the stored one), [7] TTL in ms (integer >= 1)

Returns 1 when added, -1 for malformed arguments.
]]

if ARGV[1] ~= '2' then return -1 end

local function int(s)
  local n = tonumber(s)
  if not n or n < 0 or n ~= math.floor(n) then return nil end
  return n
end

local decided, rejected, waits = int(ARGV[2]), int(ARGV[3]), int(ARGV[4])
local waited, peak, ttl = tonumber(ARGV[5]), tonumber(ARGV[6]), int(ARGV[7])
if not decided or not rejected or not waits or not waited or waited < 0 or not peak or peak < 0 or peak > 1
  or not ttl or ttl < 1 then
  return -1
end
local key = KEYS[1]
redis.call('HINCRBY', key, 'd', decided)
redis.call('HINCRBY', key, 'r', rejected)
redis.call('HINCRBY', key, 'w', waits)
redis.call('HINCRBYFLOAT', key, 'wm', ARGV[5])
local before = tonumber(redis.call('HGET', key, 'p') or '0')
if peak > before or redis.call('HEXISTS', key, 'p') == 0 then redis.call('HSET', key, 'p', ARGV[6]) end
redis.call('PEXPIRE', key, ttl)
return 1
