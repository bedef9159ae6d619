-- Sliding window counter, mirroring packages/core/src/algorithms/sliding-window.ts.
-- State: {3, slice_ms, k, c(k-N), ..., c(k)}: the index k of the newest slice and N+1 counts.
-- Counts below are Lua arrays counts[1..N+1]; the TypeScript's counts[i] is counts[i + 1] here.
-- evaluate returns: allowed, remaining, retry_after_ms, reset_after_ms, next, ttl_ms (the last
-- two only when allowed).
local sliding_window = { code = 3 }

-- Moves the ring forward to the slice containing now (never backwards).
-- Returns k, frac and a fresh counts array (callers may modify it).
local function sw_shifted(state, slice_ms, n, now)
  local stored = state[3]
  local k = max(stored, floor(now / slice_ms))
  local d = k - stored
  local counts = {}
  for i = 0, n do
    local src = i + d
    if src <= n then
      counts[i + 1] = state[4 + src]
    else
      counts[i + 1] = 0
    end
  end
  local frac = min(1, max(0, (now - k * slice_ms) / slice_ms))
  return k, frac, counts
end

-- Returns slice_ms, k, frac, counts for the limit's slicing (normalized states are compatible).
local function sw_view(state, now, limit)
  local slice_ms = limit.window_ms / limit.slices
  if state == nil then
    local k = floor(now / slice_ms)
    local counts = {}
    for i = 1, limit.slices + 1 do
      counts[i] = 0
    end
    return slice_ms, k, (now - k * slice_ms) / slice_ms, counts
  end
  return slice_ms, sw_shifted(state, slice_ms, limit.slices, now)
end

local function sw_estimate(counts, frac)
  local sum = 0
  for i = 2, #counts do
    sum = sum + counts[i]
  end
  return sum + counts[1] * (1 - frac)
end

-- Time until `excess` permits have slid out of the window.
local function sw_retry_after(counts, frac, slice_ms, excess)
  local left = excess
  local oldest = counts[1]
  local first = oldest * (1 - frac)
  if first >= left - EPS_PERMITS and oldest > 0 then
    return ceil_ms((left / oldest) * slice_ms)
  end
  left = left - first
  local elapsed = (1 - frac) * slice_ms
  for i = 2, #counts do
    local c = counts[i]
    if c > 0 and c >= left - EPS_PERMITS then
      return ceil_ms(elapsed + (left / c) * slice_ms)
    end
    left = left - c
    elapsed = elapsed + slice_ms
  end
  return ceil_ms(elapsed)
end

-- Time until every counted permit has slid out of the window.
local function sw_reset_after(counts, frac, slice_ms)
  for i = #counts, 1, -1 do
    if counts[i] > 0 then
      return ceil_ms((1 - frac) * slice_ms + (i - 1) * slice_ms)
    end
  end
  return 0
end

local function sw_state(slice_ms, k, counts)
  local state = { 3, slice_ms, k }
  for i = 1, #counts do
    state[3 + i] = counts[i]
  end
  return state
end

function sliding_window.evaluate(state, cost, now, limit)
  local slice_ms, k, frac, counts = sw_view(state, now, limit)
  local estimate = sw_estimate(counts, frac)
  local ttl = ceil_ms((k + limit.slices + 1) * slice_ms - now)
  if estimate + cost <= limit.limit + EPS_PERMITS then
    local remaining = whole_permits(limit.limit - estimate - cost)
    local newest = limit.slices + 1
    counts[newest] = counts[newest] + cost
    return true, remaining, 0, sw_reset_after(counts, frac, slice_ms), sw_state(slice_ms, k, counts), ttl
  end
  return false,
    whole_permits(limit.limit - estimate),
    sw_retry_after(counts, frac, slice_ms, estimate + cost - limit.limit),
    sw_reset_after(counts, frac, slice_ms)
end

function sliding_window.adjust(state, delta, now, limit)
  local slice_ms, k, _frac, counts = sw_view(state, now, limit)
  local n = limit.slices
  if delta >= 0 then
    counts[n + 1] = counts[n + 1] + delta
  else
    -- A refund returns the newest charges first: they are the ones the call just made.
    local left = -delta
    local i = n + 1
    while i >= 1 and left > 0 do
      local take = min(counts[i], left)
      counts[i] = counts[i] - take
      left = left - take
      i = i - 1
    end
  end
  local any = false
  for i = 1, n + 1 do
    if counts[i] ~= 0 then
      any = true
      break
    end
  end
  if not any then
    return nil, 0
  end
  return sw_state(slice_ms, k, counts), ceil_ms((k + n + 1) * slice_ms - now)
end

function sliding_window.usage(state, now, _limit)
  local _k, frac, counts = sw_shifted(state, state[2], #state - 4, now)
  return sw_estimate(counts, frac)
end

function sliding_window.from_usage(used, now, limit)
  local slice_ms = limit.window_ms / limit.slices
  local k = floor(now / slice_ms)
  local each = used / limit.slices
  local state = { 3, slice_ms, k, 0 }
  for i = 1, limit.slices do
    state[4 + i] = each
  end
  return state
end

function sliding_window.compatible(state, limit)
  return state[2] == limit.window_ms / limit.slices and #state == limit.slices + 4
end
