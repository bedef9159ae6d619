--[[
Outcome tallies and fleet-wide circuit breakers (packages/core's fleet-breaker-state.ts, which
this file mirrors: stepFleetBreaker and the tally buckets). Time is Redis TIME, so clients'
clocks never matter. Defines outcomes(KEYS, ARGV), loaded like batch.lua (a function library,
or a script on servers without functions). All keys of one call carry the resource's hash tag.

KEYS[1]      the resource's breaker: HASH st (0 closed, 1 open, 2 half-open), oa (opened at, ms),
             pt (probe permits handed out), pk (probe successes), pl (last probe permit at),
             n (buckets), and per ring slot j (0..n-1): ij (bucket number), cj calls,
             fj failures, sj slow calls
KEYS[2..]    tallies (only for 'report'; for 'read', KEYS[1] is the tally read): HASH per ring
             slot j = bucket % 600 of 1000 ms buckets: ij bucket number, cj calls, fj failures,
             sj slow calls, dj summed duration (ms, a float)

ARGV for a report:
  [1]  'report'
  [2]  T, the tallies (#KEYS - 1; the first is the resource's, the others its cohorts')
  then 4 values per tally: calls, failures, slow (integers >= 0), duration (ms, a float >= 0)
  then '1' to judge the breaker by the first tally's outcomes (else '0' and nothing follows):
       window_ms, buckets, minimum_calls, failure_rate (float), slow_rate (float),
       open_ms, probes, then take_probe ('1' asks for a probe permit)
Returns {0, state, retry_after_ms, probe (1 granted)}; state -1 when no breaker was judged.

ARGV for a read:
  [1]  'read'
  [2]  window_ms (1..600000): the tally's buckets ending at now's
  [3]  '1' for whole buckets only: the window ends with the bucket before now's (optional, '0')
Returns {0, calls, failures, slow, duration (a string)}.

Returns {2, message} (ERR_BAD_ARGUMENT) when the arguments are malformed; nothing is applied.
]]

local TALLY_BUCKET_MS = 1000
local TALLY_SLOTS = 600
-- A tally is kept this long after its last write (its whole ring, and then some).
local TALLY_TTL_MS = TALLY_BUCKET_MS * TALLY_SLOTS + 60000

local function clock_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function tally(key, index, calls, failures, slow, duration)
  local j = index % TALLY_SLOTS
  local at = tonumber(redis.call('HGET', key, 'i' .. j))
  if at ~= index then
    redis.call('HSET', key, 'i' .. j, index, 'c' .. j, 0, 'f' .. j, 0, 's' .. j, 0, 'd' .. j, 0)
  end
  redis.call('HINCRBY', key, 'c' .. j, calls)
  redis.call('HINCRBY', key, 'f' .. j, failures)
  redis.call('HINCRBY', key, 's' .. j, slow)
  redis.call('HINCRBYFLOAT', key, 'd' .. j, duration)
  redis.call('PEXPIRE', key, TALLY_TTL_MS)
end

local function read(keys, argv, now)
  local window = tonumber(argv[2])
  if window == nil or window < 1 or window > TALLY_BUCKET_MS * TALLY_SLOTS then
    return { 2, 'window_ms out of bounds' }
  end
  local last = math.floor(now / TALLY_BUCKET_MS)
  if argv[3] == '1' then
    last = last - 1
  elseif argv[3] ~= nil and argv[3] ~= '0' then
    return { 2, 'complete must be 0 or 1' }
  end
  local span = math.max(1, math.ceil(window / TALLY_BUCKET_MS))
  local calls, failures, slow, duration = 0, 0, 0, 0
  for index = last - span + 1, last do
    local j = index % TALLY_SLOTS
    local v = redis.call('HMGET', keys[1], 'i' .. j, 'c' .. j, 'f' .. j, 's' .. j, 'd' .. j)
    if tonumber(v[1]) == index then
      calls = calls + tonumber(v[2])
      failures = failures + tonumber(v[3])
      slow = slow + tonumber(v[4])
      duration = duration + tonumber(v[5])
    end
  end
  return { 0, calls, failures, slow, string.format('%.17g', duration) }
end

-- stepFleetBreaker: the record is read whole, changed, and written back.
local function judge(key, p, now, calls, failures, slow, take_probe)
  local f = redis.call('HMGET', key, 'st', 'oa', 'pt', 'pk', 'pl', 'n')
  local r = {
    st = tonumber(f[1]) or 0,
    oa = tonumber(f[2]) or 0,
    pt = tonumber(f[3]) or 0,
    pk = tonumber(f[4]) or 0,
    pl = tonumber(f[5]) or 0,
  }
  local n = p.buckets
  local reset_ring = tonumber(f[6]) ~= n
  if reset_ring then
    -- New, or made under another number of buckets: start closed with an empty window.
    redis.call('DEL', key)
    r = { st = 0, oa = 0, pt = 0, pk = 0, pl = 0 }
  end
  local function transition(to)
    if r.st == to then
      return
    end
    r.st = to
    if to == 1 then
      r.oa = now
    end
    r.pl = now
    r.pt = 0
    r.pk = 0
    if to == 0 then
      for j = 0, n - 1 do
        redis.call('HSET', key, 'i' .. j, -1)
      end
    end
  end
  if r.st == 1 and now >= r.oa + p.open_ms then
    transition(2)
  end
  if calls > 0 then
    if r.st == 2 then
      if failures > 0 or slow > 0 then
        transition(1)
      else
        r.pk = r.pk + calls
        if r.pk >= p.probes then
          transition(0)
        end
      end
    elseif r.st == 0 then
      local index = math.floor(now / (p.window_ms / n))
      local j = index % n
      if tonumber(redis.call('HGET', key, 'i' .. j)) ~= index then
        redis.call('HSET', key, 'i' .. j, index, 'c' .. j, 0, 'f' .. j, 0, 's' .. j, 0)
      end
      redis.call('HINCRBY', key, 'c' .. j, calls)
      redis.call('HINCRBY', key, 'f' .. j, failures)
      redis.call('HINCRBY', key, 's' .. j, slow)
      local c, fl, sl = 0, 0, 0
      for k = 0, n - 1 do
        local v = redis.call('HMGET', key, 'i' .. k, 'c' .. k, 'f' .. k, 's' .. k)
        local at = tonumber(v[1])
        if at ~= nil and at > index - n then
          c = c + tonumber(v[2])
          fl = fl + tonumber(v[3])
          sl = sl + tonumber(v[4])
        end
      end
      if c >= p.minimum_calls and (fl / c >= p.failure_rate or sl / c >= p.slow_rate) then
        transition(1)
      end
    end
  end
  local probe = 0
  if take_probe and r.st == 2 then
    if now - r.pl >= p.open_ms then
      r.pt = r.pk
    end
    if r.pt < p.probes then
      r.pt = r.pt + 1
      r.pl = now
      probe = 1
    end
  end
  redis.call('HSET', key, 'st', r.st, 'oa', r.oa, 'pt', r.pt, 'pk', r.pk, 'pl', r.pl, 'n', n)
  redis.call('PEXPIRE', key, 2 * (p.window_ms + p.open_ms) + 60000)
  local retry = 0
  if r.st == 1 then
    retry = math.max(0, math.ceil(r.oa + p.open_ms - now))
  elseif r.st == 2 and probe == 0 then
    retry = math.max(0, math.ceil(r.pl + p.open_ms - now))
  end
  return { 0, r.st, retry, probe }
end

local function report(keys, argv, now)
  local t = tonumber(argv[2])
  if t == nil or t < 1 or t ~= #keys - 1 then
    return { 2, 'tally count does not match the keys' }
  end
  local index = math.floor(now / TALLY_BUCKET_MS)
  local first = {}
  for i = 1, t do
    local base = 2 + (i - 1) * 4
    local calls, failures, slow, duration =
      tonumber(argv[base + 1]), tonumber(argv[base + 2]), tonumber(argv[base + 3]), tonumber(argv[base + 4])
    if calls == nil or failures == nil or slow == nil or duration == nil or calls < 0 or failures < 0 or slow < 0 then
      return { 2, 'malformed tally' }
    end
    if i == 1 then
      first = { calls, failures, slow }
    end
    if calls > 0 then
      tally(keys[i + 1], index, calls, failures, slow, duration)
    end
  end
  local b = 3 + t * 4
  if argv[b] ~= '1' then
    return { 0, -1, 0, 0 }
  end
  local p = {
    window_ms = tonumber(argv[b + 1]),
    buckets = tonumber(argv[b + 2]),
    minimum_calls = tonumber(argv[b + 3]),
    failure_rate = tonumber(argv[b + 4]),
    slow_rate = tonumber(argv[b + 5]),
    open_ms = tonumber(argv[b + 6]),
    probes = tonumber(argv[b + 7]),
  }
  for _, v in pairs({ 'window_ms', 'buckets', 'minimum_calls', 'failure_rate', 'slow_rate', 'open_ms', 'probes' }) do
    if p[v] == nil or p[v] <= 0 then
      return { 2, 'malformed breaker policy: ' .. v }
    end
  end
  if p.buckets > 1000 then
    return { 2, 'too many buckets' }
  end
  return judge(keys[1], p, now, first[1], first[2], first[3], argv[b + 8] == '1')
end

local function outcomes(keys, argv)
  local now = clock_ms()
  if argv[1] == 'read' then
    return read(keys, argv, now)
  elseif argv[1] == 'report' then
    return report(keys, argv, now)
  end
  return { 2, 'unknown operation' }
end
