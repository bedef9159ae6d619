-- Generic cell rate algorithm, mirroring packages/core/src/algorithms/gcra.ts.
-- State: {2, tat, T} with T = window_ms / limit, the emission interval the state was built with.
-- evaluate returns: allowed, remaining, retry_after_ms, reset_after_ms, next, ttl_ms (the last
-- two only when allowed).
local gcra = { code = 2 }

function gcra.evaluate(state, cost, now, limit)
  local T = limit.window_ms / limit.limit
  local tau = limit.burst * T
  local tat = state == nil and now or max(state[2], now)
  local new_tat = tat + cost * T
  if new_tat - now <= tau + EPS_MS then
    local reset_after = ceil_ms(new_tat - now)
    return true, whole_permits((tau - (new_tat - now)) / T), 0, reset_after, { 2, new_tat, T }, reset_after
  end
  return false, whole_permits((tau - (tat - now)) / T), ceil_ms(new_tat - tau - now), ceil_ms(tat - now)
end

function gcra.adjust(state, delta, now, limit)
  local T = limit.window_ms / limit.limit
  local tat = state == nil and now or max(state[2], now)
  -- As the token bucket: a refund stops at a full bucket, a charge at one window of debt.
  local new_tat
  if delta <= 0 then
    new_tat = max(now, tat + delta * T)
  else
    new_tat = max(tat, min(tat + delta * T, now + (limit.burst + limit.limit) * T))
  end
  local ttl = ceil_ms(new_tat - now)
  if new_tat > now then
    return { 2, new_tat, T }, ttl
  end
  return nil, ttl
end

function gcra.usage(state, now, _limit)
  return max(0, state[2] - now) / state[3]
end

function gcra.from_usage(used, now, limit)
  local T = limit.window_ms / limit.limit
  return { 2, now + used * T, T }
end

function gcra.compatible(state, limit)
  return state[3] == limit.window_ms / limit.limit
end

-- Bookings (deferred admission, lib/booking.lua), mirroring the TypeScript's startOf,
-- claimSpan, book, unbook and claim. book, unbook and claim return next and ttl_ms, as adjust.

-- The state as it is (a claim charges nothing more), with its lifetime.
local function gcra_kept(state, now)
  if state == nil or state[2] <= now then
    return nil, 0
  end
  return state, ceil_ms(state[2] - now)
end

function gcra.start_of(state, cost, from, now, limit)
  local T = limit.window_ms / limit.limit
  local tat = state == nil and now or max(state[2], now)
  return max(from, tat + cost * T - limit.burst * T)
end

-- The spare burst (burst - cost) in ms.
local function gcra_spare(cost, limit)
  return (limit.burst - cost) * (limit.window_ms / limit.limit)
end

-- The spare burst, but at least one emission interval (with burst = cost a span of 0 could
-- never be claimed).
function gcra.claim_span(_state, cost, _start, _now, limit)
  return max(gcra_spare(cost, limit), limit.window_ms / limit.limit)
end

-- Judged as an admission at the end of the spare burst (the span's end, unless the span was
-- raised to one emission interval), and conforming at its start.
function gcra.book(state, cost, start, stop, now, limit)
  local T = limit.window_ms / limit.limit
  local tat = state == nil and now or max(state[2], now)
  local new_tat = max(tat, min(stop, start + gcra_spare(cost, limit))) + cost * T
  return { 2, new_tat, T }, ceil_ms(new_tat - now)
end

-- Only the newest booking can be given back: later admissions were judged on its charge.
function gcra.unbook(state, cost, _start, _stop, now, limit, newest)
  if newest then
    return gcra.adjust(state, -cost, now, limit)
  end
  return gcra_kept(state, now)
end

function gcra.claim(state, _cost, _stop, now, _limit)
  return gcra_kept(state, now)
end
