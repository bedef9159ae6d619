--[[
sluice leadership script, protocol 1: one leader at a time for a named duty (deciding a
rollout's ramp, moving an adaptive limit). The leader's id sits in a STRING key with a TTL; the
leader keeps it by calling again well within the TTL, and a leader that stops calling (it died)
loses it when the TTL ends, so another caller takes over.

KEYS:
  [1] the leadership, a STRING holding the leader's id

ARGV:
  [1] protocol version, "1"
  [2] the caller's id (1..128 characters)
  [3] the TTL in ms: an integer >= 1 takes the leadership when free or extends it for its
      leader; "0" resigns it when the caller is the leader

Returns 1 when the caller is the leader afterwards (or, resigning, resigned), 0 when another
is (or, resigning, the caller was not), -1 for malformed arguments.
]]

if ARGV[1] ~= '1' then return -1 end
local owner = ARGV[2]
local ttl = tonumber(ARGV[3])
if not owner or string.len(owner) < 1 or string.len(owner) > 128 then return -1 end
if not ttl or ttl < 0 or ttl ~= math.floor(ttl) then return -1 end
local holder = redis.call('GET', KEYS[1])
if ttl == 0 then
  if holder ~= owner then return 0 end
  redis.call('DEL', KEYS[1])
  return 1
end
if holder and holder ~= owner then return 0 end
redis.call('SET', KEYS[1], owner, 'PX', ttl)
return 1
