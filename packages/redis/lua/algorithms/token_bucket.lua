-- Token bucket, mirroring packages/core/src/algorithms/token-bucket.ts.
-- State: {1, used, ts}. Usage drains at limit/window_ms per ms; a request passes if
-- used + cost <= burst.
-- evaluate returns: allowed, remaining, retry_after_ms, reset_after_ms, next, ttl_ms (the last
-- two only when allowed: a denied request never writes).
local token_bucket = { code = 1 }

local function tb_drained(state, now, rate)
  local elapsed = max(0, now - state[3])
  return max(0, state[2] - elapsed * rate)
end

function token_bucket.evaluate(state, cost, now, limit)
  local rate = limit.limit / limit.window_ms
  local used, ts
  if state == nil then
    used, ts = 0, now
  else
    used, ts = tb_drained(state, now, rate), max(now, state[3])
  end
  if used + cost <= limit.burst + EPS_PERMITS then
    local after = used + cost
    local reset_after = ceil_ms(after / rate)
    return true, whole_permits(limit.burst - after), 0, reset_after, { 1, after, ts }, reset_after
  end
  return false, whole_permits(limit.burst - used), ceil_ms((used + cost - limit.burst) / rate), ceil_ms(used / rate)
end

-- Returns next (nil: no state needed) and ttl_ms.
function token_bucket.adjust(state, delta, now, limit)
  local rate = limit.limit / limit.window_ms
  -- A charge takes the key at most one window into debt.
  local used = adjusted_usage(state == nil and 0 or tb_drained(state, now, rate), delta, limit.burst + limit.limit)
  local ts = state == nil and now or max(now, state[3])
  local ttl = ceil_ms(used / rate)
  if used > 0 then
    return { 1, used, ts }, ttl
  end
  return nil, ttl
end

function token_bucket.usage(state, now, limit)
  return tb_drained(state, now, limit.limit / limit.window_ms)
end

function token_bucket.from_usage(used, now, _limit)
  return { 1, used, now }
end

function token_bucket.compatible(_state, _limit)
  return true
end

-- Bookings (deferred admission, lib/booking.lua), mirroring the TypeScript's startOf,
-- claimSpan, book, unbook and claim. book, unbook and claim return next and ttl_ms, as adjust.

-- The state as it is (a claim charges nothing more), with its lifetime.
local function tb_kept(state, now, limit)
  local used = state == nil and 0 or tb_drained(state, now, limit.limit / limit.window_ms)
  if used <= 0 then
    return nil, 0
  end
  return state, ceil_ms(used / (limit.limit / limit.window_ms))
end

function token_bucket.start_of(state, cost, from, now, limit)
  local rate = limit.limit / limit.window_ms
  local used = state == nil and 0 or tb_drained(state, now, rate)
  return max(from, now + (used + cost - limit.burst) / rate)
end

-- How long the spare burst (burst - cost) takes to drain, in ms.
local function tb_spare(cost, limit)
  return (limit.burst - cost) / (limit.limit / limit.window_ms)
end

function token_bucket.claim_span(_state, cost, _start, _now, limit)
  return max(tb_spare(cost, limit), limit.window_ms / limit.limit)
end

-- Charged as if admitted at the span's end, or at the end of its spare burst when the span was
-- raised to one emission interval (usage now includes the drain until then); may exceed the
-- burst (a debt).
function token_bucket.book(state, cost, start, stop, now, limit)
  local rate = limit.limit / limit.window_ms
  local used = state == nil and 0 or tb_drained(state, now, rate)
  local ts = state == nil and now or max(now, state[3])
  local at = min(stop, start + tb_spare(cost, limit))
  local after = max(used, (at - now) * rate) + cost
  return { 1, after, ts }, ceil_ms(after / rate)
end

-- Only the newest booking can be given back: later admissions were judged on its charge.
function token_bucket.unbook(state, cost, _start, _stop, now, limit, newest)
  if newest then
    return token_bucket.adjust(state, -cost, now, limit)
  end
  return tb_kept(state, now, limit)
end

function token_bucket.claim(state, _cost, _stop, now, limit)
  return tb_kept(state, now, limit)
end
