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
