-- Exact sliding window log, mirroring packages/core/src/algorithms/sliding-log.ts.
-- State: {5, ts1, cost1, ts2, cost2, ...} in time order (timed_log.lua, one header value).
-- evaluate returns: allowed, remaining, retry_after_ms, reset_after_ms, next, ttl_ms (the last
-- two only when allowed).
--@include "timed_log.lua"
local sliding_log = { code = 5 }

function sliding_log.evaluate(state, cost, now, limit, hold)
  local log = tl_live(state or { 5 }, 1, now, limit.window_ms)
  local count = tl_sum(log, 1)
  if count + cost <= limit.limit + EPS_PERMITS then
    local remaining = whole_permits(limit.limit - count - cost)
    if cost > 0 then
      tl_append(log, 1, now + hold, cost)
    end
    local reset_after = tl_reset_after(log, 1, now, limit.window_ms)
    return true, remaining, 0, reset_after, log, reset_after
  end
  return false,
    whole_permits(limit.limit - count),
    tl_retry_after(log, 1, count + cost - limit.limit, now, limit.window_ms),
    tl_reset_after(log, 1, now, limit.window_ms)
end

function sliding_log.adjust(state, delta, now, limit, at)
  local log = tl_live(state or { 5 }, 1, now, limit.window_ms)
  if delta > 0 then
    -- A charge counts at most limit permits: more could not block longer than one window.
    tl_append(log, 1, now, min(delta, limit.limit))
  else
    tl_refund_for(log, 1, -delta, now, at)
  end
  if #log == 1 then
    return nil, 0
  end
  return log, tl_reset_after(log, 1, now, limit.window_ms)
end

function sliding_log.usage(state, now, limit)
  return tl_sum(tl_live(state, 1, now, limit.window_ms), 1)
end

function sliding_log.from_usage(used, now, _limit)
  if used > 0 then
    return { 5, now, used }
  end
  return { 5 }
end

function sliding_log.compatible(_state, _limit)
  return true
end

-- Bookings (deferred admission, lib/booking.lua), mirroring the TypeScript's startOf,
-- claimSpan, book, unbook and claim. book, unbook and claim return next and ttl_ms, as adjust.

-- The state for a log (logOf): none once it holds no entry.
local function sl_of(log, now, limit)
  if #log == 1 then
    return nil, 0
  end
  return log, tl_reset_after(log, 1, now, limit.window_ms)
end

function sliding_log.start_of(state, cost, from, _now, limit)
  return tl_start_of(state or { 5 }, 1, cost, from, limit.limit, limit.window_ms)
end

-- The log counts the permits to the span's end: any span keeps the bound.
function sliding_log.claim_span()
  return math.huge
end

-- Stamped at the span's end: counted in every window any use in the span can fall in.
function sliding_log.book(state, cost, _start, stop, now, limit)
  local log = tl_live(state or { 5 }, 1, now, limit.window_ms)
  tl_append(log, 1, stop, cost)
  return sl_of(log, now, limit)
end

-- Once its stamp has left the window the charge is gone: nothing is taken back then.
function sliding_log.unbook(state, cost, _start, stop, now, limit)
  local log = tl_live(state or { 5 }, 1, now, limit.window_ms)
  if not (stop + limit.window_ms <= now) then
    tl_refund_at(log, 1, cost, stop)
  end
  return sl_of(log, now, limit)
end

-- A claim moves the booking's charge from its stamp to now.
function sliding_log.claim(state, cost, stop, now, limit)
  local log = tl_live(state or { 5 }, 1, now, limit.window_ms)
  tl_refund_at(log, 1, cost, stop)
  tl_append(log, 1, now, cost)
  return sl_of(log, now, limit)
end
