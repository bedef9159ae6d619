-- Exact sliding window log, mirroring packages/core/src/algorithms/sliding-log.ts.
-- State: {5, ts1, cost1, ts2, cost2, ...} in time order; an entry counts while ts + window_ms > now.
-- The helpers below work on whole state tables (code first), so entries are log[2..]; the
-- TypeScript's entries[i] is log[i + 2] here.
-- evaluate returns: allowed, remaining, retry_after_ms, reset_after_ms, next, ttl_ms (the last
-- two only when allowed).
local sliding_log = { code = 5 }

-- A fresh state holding the entries still inside the window.
local function sl_live(state, now, window_ms)
  local log = { 5 }
  if state == nil then
    return log
  end
  local len = #state
  local i = 2
  while i <= len and state[i] + window_ms <= now do
    i = i + 2
  end
  local j = 1
  for p = i, len do
    j = j + 1
    log[j] = state[p]
  end
  return log
end

local function sl_sum(log)
  local s = 0
  for i = 3, #log, 2 do
    s = s + log[i]
  end
  return s
end

-- Appends in place, keeping time order even if the clock stepped back.
local function sl_append(log, now, cost)
  local len = #log
  local last_ts = len > 1 and log[len - 1] or now
  log[len + 1] = max(now, last_ts)
  log[len + 2] = cost
end

local function sl_reset_after(log, now, window_ms)
  local len = #log
  if len == 1 then
    return 0
  end
  return ceil_ms(log[len - 1] + window_ms - now)
end

function sliding_log.evaluate(state, cost, now, limit)
  local log = sl_live(state, now, limit.window_ms)
  local count = sl_sum(log)
  if count + cost <= limit.limit + EPS_PERMITS then
    local remaining = whole_permits(limit.limit - count - cost)
    if cost > 0 then
      sl_append(log, now, cost)
    end
    local reset_after = sl_reset_after(log, now, limit.window_ms)
    return true, remaining, 0, reset_after, log, reset_after
  end
  local excess = count + cost - limit.limit
  local retry_after = 0
  for i = 2, #log, 2 do
    excess = excess - log[i + 1]
    if excess <= EPS_PERMITS then
      retry_after = ceil_ms(log[i] + limit.window_ms - now)
      break
    end
  end
  return false, whole_permits(limit.limit - count), retry_after, sl_reset_after(log, now, limit.window_ms)
end

function sliding_log.adjust(state, delta, now, limit)
  local log = sl_live(state, now, limit.window_ms)
  if delta > 0 then
    sl_append(log, now, delta)
  else
    -- Refunds remove the newest charges first.
    local left = -delta
    while left > 0 and #log > 1 do
      local len = #log
      local c = log[len]
      if c <= left then
        log[len] = nil
        log[len - 1] = nil
        left = left - c
      else
        log[len] = c - left
        left = 0
      end
    end
  end
  if #log == 1 then
    return nil, 0
  end
  return log, sl_reset_after(log, now, limit.window_ms)
end

function sliding_log.usage(state, now, limit)
  return sl_sum(sl_live(state, now, limit.window_ms))
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
