-- Sliding window with bounded state, mirroring packages/core/src/algorithms/sliding-window.ts.
-- State: {3, 0, ts1, cost1, ts2, cost2, ...}: at most 8 * slices groups of admitted calls in
-- time order (timed_log.lua, two header values), each stamped with its newest call and counted
-- in full while the stamp is inside the window. States {3, slice_ms > 0, k, ...} are the counted
-- slices of earlier versions, converted through usage().
-- evaluate returns: allowed, remaining, retry_after_ms, reset_after_ms, next, ttl_ms (the last
-- two only when allowed).
--@include "timed_log.lua"
local sliding_window = { code = 3 }

-- Merges neighbouring groups in place until at most 8 * slices remain: each merge moves the
-- older group's permits to the newer stamp, choosing the pair that wastes the fewest
-- permit-milliseconds (ties: the oldest pair).
local function sw_merge(log, limit)
  local cap = 2 + 2 * 8 * limit.slices
  while #log > cap do
    local best = 3
    local best_waste = math.huge
    for i = 3, #log - 2, 2 do
      local waste = log[i + 1] * (log[i + 2] - log[i])
      if waste < best_waste then
        best_waste = waste
        best = i
      end
    end
    log[best + 3] = log[best + 3] + log[best + 1]
    tremove(log, best)
    tremove(log, best)
  end
end

local function sw_live(state, now, limit)
  local log = tl_live(state or { 3, 0 }, 2, now, limit.window_ms)
  sw_merge(log, limit)
  return log
end

function sliding_window.evaluate(state, cost, now, limit, hold)
  local log = sw_live(state, now, limit)
  local count = tl_sum(log, 2)
  if count + cost <= limit.limit + EPS_PERMITS then
    local remaining = whole_permits(limit.limit - count - cost)
    if cost > 0 then
      tl_append(log, 2, now + hold, cost)
      sw_merge(log, limit)
    end
    local reset_after = tl_reset_after(log, 2, now, limit.window_ms)
    return true, remaining, 0, reset_after, log, reset_after
  end
  return false,
    whole_permits(limit.limit - count),
    tl_retry_after(log, 2, count + cost - limit.limit, now, limit.window_ms),
    tl_reset_after(log, 2, now, limit.window_ms)
end

function sliding_window.adjust(state, delta, now, limit, at)
  local log = sw_live(state, now, limit)
  if delta > 0 then
    tl_append(log, 2, now, min(delta, limit.limit))
    sw_merge(log, limit)
  else
    tl_refund_for(log, 2, -delta, now, at)
  end
  if #log == 2 then
    return nil, 0
  end
  return log, tl_reset_after(log, 2, now, limit.window_ms)
end

function sliding_window.usage(state, now, limit)
  if state[2] == 0 then
    return tl_sum(tl_live(state, 2, now, limit.window_ms), 2)
  end
  -- Counted slices of an earlier version: every call they hold, wherever it was in its slice.
  local used = 0
  for i = 4, #state, 3 do
    used = used + state[i]
  end
  return used
end

function sliding_window.from_usage(used, now, _limit)
  if used > 0 then
    return { 3, 0, now, used }
  end
  return { 3, 0 }
end

function sliding_window.compatible(state, _limit)
  return state[2] == 0
end

-- Bookings (deferred admission, lib/booking.lua), mirroring the TypeScript's startOf,
-- claimSpan, book, unbook and claim. book, unbook and claim return next and ttl_ms, as adjust.

-- The state for a window's groups (windowOf): none once it holds no group.
local function sw_of(log, now, limit)
  if #log == 2 then
    return nil, 0
  end
  return log, tl_reset_after(log, 2, now, limit.window_ms)
end

function sliding_window.start_of(state, cost, from, _now, limit)
  return tl_start_of(state or { 3, 0 }, 2, cost, from, limit.limit, limit.window_ms)
end

-- The window counts the permits to the span's end: any span keeps the bound.
function sliding_window.claim_span()
  return math.huge
end

-- Stamped at the span's end, as a lease's charge: counted in every window a use can fall in.
function sliding_window.book(state, cost, _start, stop, now, limit)
  local log = sw_live(state, now, limit)
  tl_append(log, 2, stop, cost)
  sw_merge(log, limit)
  return sw_of(log, now, limit)
end

-- Once its stamp has left the window the charge is gone, or merged into a later group that
-- cannot be told apart: nothing is taken back then.
function sliding_window.unbook(state, cost, _start, stop, now, limit)
  local log = sw_live(state, now, limit)
  if not (stop + limit.window_ms <= now) then
    tl_refund_at(log, 2, cost, stop)
  end
  return sw_of(log, now, limit)
end

-- A claim moves the booking's charge from its stamp to now.
function sliding_window.claim(state, cost, stop, now, limit)
  local log = sw_live(state, now, limit)
  tl_refund_at(log, 2, cost, stop)
  tl_append(log, 2, now, cost)
  sw_merge(log, limit)
  return sw_of(log, now, limit)
end
