-- evaluateKey() of packages/core/src/store/evaluate.ts: every limit of a key judged on its current
-- state, nothing written. Used by the operations (lib/operations.lua) and by bookings
-- (lib/booking.lua). Results are appended to one flat reply (see batch.lua's header); per-item
-- tables are avoided on purpose, as allocation is a large part of a decision's cost in Redis' Lua.

-- Two's power past which a reply figure is sent as an exact string (an integer reply would
-- lose precision in JavaScript).
local EXACT_INTEGER = 9007199254740992

-- Scratch table reused by every item: the next states of an evaluation.
local NEXTS = {}

-- One limit's decision on the key's current (aligned) state (decideLimit): allowed, remaining,
-- retry_after, reset_after, then the next state (a rate limit) or the plan (concurrency), and the
-- ttl; the last two only when allowed. Nothing is written. `hold` as the rate algorithms take it.
local function decide_limit(entry, limit, cost, permit_id, now, hold)
  local state = entry.states[limit.id]
  if limit.code == concurrency.code then
    return concurrency.acquire(entry, state, permit_id, cost, now, limit)
  end
  return RATE[limit.code].evaluate(normalize_state(state, now, limit), cost, now, limit, hold)
end

-- evaluateKey(): every limit evaluated on the current state, nothing written. Writes the
-- statuses to out[at + 1 ...] (allowed as 1/0, remaining, retry_after, reset_after per limit),
-- the next states to NEXTS, and returns allowed, the concurrency plan and the key's ttl.
-- `core_share` (0..MAX_CORE_SHARE) is the share of each limit kept for core traffic: the cost
-- must fit with floor(core_share * capacity) on top, and only the cost is charged. `hold` (ms) is how long after
-- now the permits may be used (a reservation's; 0 otherwise).
local function evaluate_key(entry, policy, cost, permit_id, now, out, at, core_share, hold)
  local limits = policy.limits
  local allowed = true
  local ttl = 0
  local plan
  for i = 1, #limits do
    local limit = limits[i]
    local core_permits = 0
    if core_share > 0 then
      core_permits = floor(core_share * limit.capacity)
    end
    local ok, remaining, retry_after, reset_after, next_state, limit_ttl = decide_limit(entry, limit, cost + core_permits, permit_id, now, hold)
    -- The check passed with the core share: charge the cost alone.
    if core_permits > 0 and ok then
      ok, remaining, retry_after, reset_after, next_state, limit_ttl = decide_limit(entry, limit, cost, permit_id, now, hold)
    end
    if limit.code == concurrency.code then
      plan, next_state = next_state, nil
    end
    NEXTS[i] = next_state
    -- Denied outcomes carry no ttl, but a denied key is never written.
    if ok then
      ttl = max(ttl, limit_ttl)
    else
      allowed = false
    end
    out[at + 1], out[at + 2], out[at + 3], out[at + 4] = ok and 1 or 0, max(0, remaining - core_permits), retry_after, reset_after
    at = at + 4
  end
  if not allowed then
    -- Nothing was charged, so limits that would have allowed still have the cost in hand.
    for a = at - 4 * #limits + 1, at, 4 do
      if out[a] == 1 then
        out[a + 1] = out[a + 1] + cost
      end
    end
  end
  return allowed, plan, ttl
end

-- Figures past EXACT_INTEGER go as strings; the others stay numbers (integer replies).
local function exact_figures(out, from, to)
  for a = from, to, 4 do
    for b = a + 1, a + 3 do
      if out[b] >= EXACT_INTEGER then
        out[b] = fmt(out[b])
      end
    end
  end
end

