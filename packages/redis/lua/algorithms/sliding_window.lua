-- Sliding window counter, mirroring packages/core/src/algorithms/sliding-window.ts.
-- State: {3, slice_ms, k, c(k-N), f(k-N), l(k-N), ..., c(k), f(k), l(k)}: the index k of the
-- newest slice and, per slice, its count and the offsets (ms into the slice) of its first and
-- last call. Slots below are a Lua array slots[1..3(N+1)]; the TypeScript's slots[3i + j] is
-- slots[3i + j + 1] here.
-- evaluate returns: allowed, remaining, retry_after_ms, reset_after_ms, next, ttl_ms (the last
-- two only when allowed).
local sliding_window = { code = 3 }

-- Moves the ring forward to the slice containing now (never backwards).
-- Returns k, x (offset of now into the slice) and a fresh slots array (callers may modify it).
local function sw_shifted(state, slice_ms, n, now)
  local stored = state[3]
  local k = max(stored, floor(now / slice_ms))
  local d = k - stored
  local slots = {}
  for i = 0, n do
    local src = i + d
    for j = 0, 2 do
      if src <= n then
        slots[3 * i + j + 1] = state[4 + 3 * src + j]
      else
        slots[3 * i + j + 1] = 0
      end
    end
  end
  local x = min(slice_ms, max(0, now - k * slice_ms))
  return k, x, slots
end

-- Returns slice_ms, k, x, slots for the limit's slicing (normalized states are compatible).
local function sw_view(state, now, limit)
  local slice_ms = limit.window_ms / limit.slices
  if state == nil then
    local k = floor(now / slice_ms)
    local slots = {}
    for i = 1, 3 * (limit.slices + 1) do
      slots[i] = 0
    end
    return slice_ms, k, now - k * slice_ms, slots
  end
  return slice_ms, sw_shifted(state, slice_ms, limit.slices, now)
end

-- Adds cost calls at offset x of the newest slice, keeping its first and last offsets.
local function sw_charge(slots, n, cost, x)
  local c = 3 * n + 1
  if slots[c] == 0 then
    slots[c + 1] = x
    slots[c + 2] = x
  else
    slots[c + 1] = min(slots[c + 1], x)
    slots[c + 2] = max(slots[c + 2], x)
  end
  slots[c] = slots[c] + cost
end

-- Share of a slice's calls still inside the window when the window's edge is at offset y.
local function sw_share(first, last, y)
  if y >= last then
    return 0
  end
  if y < first then
    return 1
  end
  return (last - y) / (last - first)
end

local function sw_estimate(slots, x)
  local sum = 0
  for i = 1, #slots / 3 - 1 do
    sum = sum + slots[3 * i + 1]
  end
  return sum + slots[1] * sw_share(slots[2], slots[3], x)
end

-- Time until `excess` permits have slid out of the window.
local function sw_retry_after(slice_ms, x, slots, excess)
  local left = excess
  local base = -x
  for i = 0, #slots / 3 - 1 do
    local c = slots[3 * i + 1]
    local first = slots[3 * i + 2]
    local last = slots[3 * i + 3]
    local from = 0
    if i == 0 then
      from = x
    end
    local inside = c * sw_share(first, last, from)
    if c > 0 and inside >= left - EPS_PERMITS then
      local target = max(0, (inside - left) / c)
      local y = last
      if last > first then
        y = last - target * (last - first)
      end
      return ceil_ms(base + max(from, y))
    end
    left = left - inside
    base = base + slice_ms
  end
  return ceil_ms(base)
end

-- Time until every counted permit has slid out of the window.
local function sw_reset_after(slice_ms, x, slots)
  for i = #slots / 3 - 1, 0, -1 do
    if slots[3 * i + 1] > 0 then
      return ceil_ms(i * slice_ms + slots[3 * i + 3] - x)
    end
  end
  return 0
end

local function sw_state(slice_ms, k, slots)
  local state = { 3, slice_ms, k }
  for i = 1, #slots do
    state[3 + i] = slots[i]
  end
  return state
end

local function sw_copy(slots)
  local copy = {}
  for i = 1, #slots do
    copy[i] = slots[i]
  end
  return copy
end

function sliding_window.evaluate(state, cost, now, limit)
  local slice_ms, k, x, slots = sw_view(state, now, limit)
  local estimate = sw_estimate(slots, x)
  local ttl = ceil_ms((k + limit.slices + 1) * slice_ms - now)
  if estimate + cost <= limit.limit + EPS_PERMITS then
    local after = sw_copy(slots)
    if cost > 0 then
      sw_charge(after, limit.slices, cost, x)
    end
    local remaining = whole_permits(limit.limit - estimate - cost)
    return true, remaining, 0, sw_reset_after(slice_ms, x, after), sw_state(slice_ms, k, after), ttl
  end
  return false,
    whole_permits(limit.limit - estimate),
    sw_retry_after(slice_ms, x, slots, estimate + cost - limit.limit),
    sw_reset_after(slice_ms, x, slots)
end

function sliding_window.adjust(state, delta, now, limit)
  local slice_ms, k, x, slots = sw_view(state, now, limit)
  local n = limit.slices
  if delta >= 0 then
    if delta > 0 then
      sw_charge(slots, n, delta, x)
    end
  else
    -- A refund returns the newest charges first: they are the ones the call just made.
    local left = -delta
    local i = n
    while i >= 0 and left > 0 do
      local c = 3 * i + 1
      local take = min(slots[c], left)
      slots[c] = slots[c] - take
      left = left - take
      if slots[c] == 0 then
        slots[c + 1] = 0
        slots[c + 2] = 0
      end
      i = i - 1
    end
  end
  local any = false
  for i = 0, n do
    if slots[3 * i + 1] > 0 then
      any = true
      break
    end
  end
  if not any then
    return nil, 0
  end
  return sw_state(slice_ms, k, slots), ceil_ms((k + n + 1) * slice_ms - now)
end

function sliding_window.usage(state, now, _limit)
  local _k, x, slots = sw_shifted(state, state[2], (#state - 3) / 3 - 1, now)
  return sw_estimate(slots, x)
end

function sliding_window.from_usage(used, now, limit)
  local slice_ms = limit.window_ms / limit.slices
  local k = floor(now / slice_ms)
  local state = { 3, slice_ms, k, 0, 0, 0 }
  -- Spread evenly over the N newest slices, each as if its calls filled the whole slice.
  for i = 1, limit.slices do
    state[4 + 3 * i] = used / limit.slices
    state[5 + 3 * i] = 0
    state[6 + 3 * i] = slice_ms
  end
  return state
end

function sliding_window.compatible(state, limit)
  return state[2] == limit.window_ms / limit.slices and #state == 3 * (limit.slices + 1) + 3
end
