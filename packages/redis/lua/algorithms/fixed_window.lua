-- Fixed window, mirroring packages/core/src/algorithms/fixed-window.ts.
-- State: {4, window_end, count}; windows are aligned to multiples of window_ms on Redis' clock.
-- evaluate returns: allowed, remaining, retry_after_ms, reset_after_ms, next, ttl_ms (the last
-- two only when allowed).
local fixed_window = { code = 4 }

local function fw_window_end(now, window_ms)
  return (floor(now / window_ms) + 1) * window_ms
end

-- The running window's end and count, or a fresh window.
local function fw_current(state, now, window_ms)
  if state ~= nil and now < state[2] then
    return state[2], state[3]
  end
  return fw_window_end(now, window_ms), 0
end

function fixed_window.evaluate(state, cost, now, limit)
  local window_end, count = fw_current(state, now, limit.window_ms)
  local ttl = ceil_ms(window_end - now)
  if count + cost <= limit.limit + EPS_PERMITS then
    local after = count + cost
    return true, whole_permits(limit.limit - after), 0, ttl, { 4, window_end, after }, ttl
  end
  return false, whole_permits(limit.limit - count), ttl, ttl
end

function fixed_window.adjust(state, delta, now, limit)
  local window_end, count = fw_current(state, now, limit.window_ms)
  -- A charge counts at most limit permits: more could not block past the window's end.
  local after
  if delta <= 0 then
    after = max(0, count + delta)
  else
    after = count + min(delta, limit.limit)
  end
  local ttl = ceil_ms(window_end - now)
  if after > 0 then
    return { 4, window_end, after }, ttl
  end
  return nil, ttl
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
