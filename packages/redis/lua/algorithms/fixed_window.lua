-- Fixed window, mirroring packages/core/src/algorithms/fixed-window.ts.
-- State: {4, window_end, count}, followed by window_end, count pairs for windows ahead that hold
-- bookings (lib/booking.lua), in time order; windows are aligned to multiples of window_ms on
-- Redis' clock.
-- evaluate returns: allowed, remaining, retry_after_ms, reset_after_ms, next, ttl_ms (the last
-- two only when allowed).
--
-- The windows are worked on as a fresh table in the state's own layout, {4, end1, count1, end2,
-- count2, ...}: the TypeScript's w[i] (its windows without the code) is w[i + 2] here, and the
-- table is the next state as it stands.
local fixed_window = { code = 4 }

local function fw_window_end(now, window_ms)
  return (floor(now / window_ms) + 1) * window_ms
end

-- The windows that matter at now (windowsOf): first the running one (kept with its end, or a
-- new one), then the booked windows after it.
local function fw_windows(state, now, window_ms)
  if state == nil then
    return { 4, fw_window_end(now, window_ms), 0 }
  end
  local w = { 4 }
  if now < state[2] then
    for i = 2, #state do
      w[i] = state[i]
    end
    return w
  end
  for i = 4, #state - 1, 2 do
    if state[i] > now then
      local n = #w
      w[n + 1], w[n + 2] = state[i], state[i + 1]
    end
  end
  -- A booked window that has begun is the running one.
  if #w > 1 and (w[2] - window_ms <= now or w[2] <= fw_window_end(now, window_ms)) then
    return w
  end
  tinsert(w, 2, 0)
  tinsert(w, 2, fw_window_end(now, window_ms))
  return w
end

-- The end of the window holding t (windowAt): the running or a booked one, else the aligned one.
local function fw_window_at(w, t, window_ms)
  for i = 2, #w, 2 do
    local window_end = w[i]
    if window_end > t then
      if i == 2 or window_end - window_ms <= t then
        return window_end
      end
      return fw_window_end(t, window_ms)
    end
  end
  return fw_window_end(t, window_ms)
end

-- The index of the window ending at window_end, or nil.
local function fw_index_of(w, window_end)
  for i = 2, #w, 2 do
    if w[i] == window_end then
      return i
    end
  end
  return nil
end

-- The state to store for windows w (stateOf): none once nothing is counted or booked.
local function fw_state_of(w, now)
  for i = 3, #w, 2 do
    if w[i] > 0 then
      return w, ceil_ms(w[#w - 1] - now)
    end
  end
  return nil, ceil_ms(w[2] - now)
end

function fixed_window.evaluate(state, cost, now, limit)
  local w = fw_windows(state, now, limit.window_ms)
  local count = w[3]
  local reset_after = ceil_ms(w[2] - now)
  if count + cost <= limit.limit + EPS_PERMITS then
    w[3] = count + cost
    return true, whole_permits(limit.limit - count - cost), 0, reset_after, w, ceil_ms(w[#w - 1] - now)
  end
  return false, whole_permits(limit.limit - count), reset_after, reset_after
end

function fixed_window.adjust(state, delta, now, limit)
  local w = fw_windows(state, now, limit.window_ms)
  local count = w[3]
  -- A charge counts at most limit permits: more could not block past the window's end.
  if delta <= 0 then
    w[3] = max(0, count + delta)
  else
    w[3] = count + min(delta, limit.limit)
  end
  return fw_state_of(w, now)
end

function fixed_window.usage(state, now, _limit)
  if now < state[2] then
    return state[3]
  end
  return 0
end

function fixed_window.from_usage(used, now, limit)
  return { 4, fw_window_end(now, limit.window_ms), used }
end

function fixed_window.compatible(_state, _limit)
  return true
end

-- Bookings (deferred admission, lib/booking.lua), mirroring the TypeScript's startOf,
-- claimSpan, book, unbook and claim. book, unbook and claim return next and ttl_ms, as adjust.

-- The first window from `from` on with room: the running one, a booked one, or one with nothing
-- in it yet.
function fixed_window.start_of(state, cost, from, now, limit)
  local w = fw_windows(state, now, limit.window_ms)
  local t = from
  for i = 2, #w, 2 do
    local window_end = w[i]
    if window_end > t then
      -- A gap before this booked window: free.
      if window_end - limit.window_ms > t and i > 2 then
        break
      end
      if w[i + 1] + cost <= limit.limit + EPS_PERMITS then
        return t
      end
      t = window_end
    end
  end
  return t
end

-- A booking is used within its window.
function fixed_window.claim_span(state, _cost, start, now, limit)
  return fw_window_at(fw_windows(state, now, limit.window_ms), start, limit.window_ms) - start
end

-- Counted in the window its span lies in, a new pair if that window holds nothing yet.
function fixed_window.book(state, cost, start, _stop, now, limit)
  local w = fw_windows(state, now, limit.window_ms)
  local window_end = fw_window_at(w, start, limit.window_ms)
  local i = fw_index_of(w, window_end)
  if i ~= nil then
    w[i + 1] = w[i + 1] + cost
  else
    i = 2
    while i <= #w and w[i] < window_end do
      i = i + 2
    end
    tinsert(w, i, cost)
    tinsert(w, i, window_end)
  end
  return fw_state_of(w, now)
end

-- Taken back from the booking's window, if it has not ended (then its count no longer matters).
function fixed_window.unbook(state, cost, start, _stop, now, limit)
  local w = fw_windows(state, now, limit.window_ms)
  local i = nil
  if not (start < w[2] - limit.window_ms) then
    i = fw_index_of(w, fw_window_at(w, start, limit.window_ms))
  end
  if i ~= nil then
    w[i + 1] = max(0, w[i + 1] - cost)
  end
  return fw_state_of(w, now)
end

-- The booked count is the use: a claim changes nothing but the windows that ended.
function fixed_window.claim(state, _cost, _stop, now, limit)
  return fw_state_of(fw_windows(state, now, limit.window_ms), now)
end
