-- The operations an item can ask for, mirroring evaluateKey()/reserveKey()/adjustKey() in
-- packages/core/src/evaluate.ts and the MemoryStore methods around them. Results are appended
-- to one flat reply (see batch.lua's header); per-item tables are avoided on purpose, as
-- allocation is a large part of a decision's cost in Redis' Lua.

-- Two's power past which a reply figure is sent as an exact string (an integer reply would
-- lose precision in JavaScript).
local EXACT_INTEGER = 9007199254740992

-- Scratch tables reused by every item: the next states of an evaluation, and the statuses of
-- reserve's zero-cost look.
local NEXTS = {}
local PEEK = {}

-- One limit's decision on the key's current (aligned) state (decideLimit): allowed, remaining,
-- retry_after, reset_after, then the next state (a rate limit) or the plan (concurrency), and the
-- ttl; the last two only when allowed. Nothing is written. `hold` as the rate algorithms take it.
local function decide_limit(entry, limit, cost, lease_id, now, hold)
  local state = entry.states[limit.id]
  if limit.code == concurrency.code then
    return concurrency.acquire(entry, state, lease_id, cost, now, limit)
  end
  return RATE[limit.code].evaluate(normalize_state(state, now, limit), cost, now, limit, hold)
end

-- evaluateKey(): every limit evaluated on the current state, nothing written. Writes the
-- statuses to out[at + 1 ...] (allowed as 1/0, remaining, retry_after, reset_after per limit),
-- the next states to NEXTS, and returns allowed, the concurrency plan and the key's ttl.
-- `reserve` (0..MAX_RESERVE) is the share of each limit held back: the cost must fit with
-- floor(reserve * capacity) on top, and only the cost is charged. `hold` (ms) is how long after
-- now the permits may be used (a reservation's; 0 otherwise).
local function evaluate_key(entry, policy, cost, lease_id, now, out, at, reserve, hold)
  local limits = policy.limits
  local allowed = true
  local ttl = 0
  local plan
  for i = 1, #limits do
    local limit = limits[i]
    local held = 0
    if reserve > 0 then
      held = floor(reserve * limit.capacity)
    end
    local ok, remaining, retry_after, reset_after, next_state, limit_ttl = decide_limit(entry, limit, cost + held, lease_id, now, hold)
    -- The check passed with the reserve: charge the cost alone.
    if held > 0 and ok then
      ok, remaining, retry_after, reset_after, next_state, limit_ttl = decide_limit(entry, limit, cost, lease_id, now, hold)
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
    out[at + 1], out[at + 2], out[at + 3], out[at + 4] = ok and 1 or 0, max(0, remaining - held), retry_after, reset_after
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

-- Charges an allowed evaluation: the concurrency plan, then the states in NEXTS.
local function commit_key(entry, policy, plan, lease_id, ttl, now)
  if policy.concurrency ~= nil then
    NEXTS[policy.concurrency] = concurrency.commit(entry, plan, lease_id, now)
  end
  entry_write(entry, policy, NEXTS, now + ttl)
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

-- consume: all-or-nothing over the key's limits, `reserve` of each held back. Appends A, then
-- per limit a, m, t, s.
local function op_consume(entry, policy, cost, lease_id, reserve, now, out)
  entry_align(entry, policy, now)
  local head = #out + 1
  -- Filled first so the reply stays a sequence (no holes) while statuses are written after it.
  out[head] = 0
  local allowed, plan, ttl = evaluate_key(entry, policy, cost, lease_id, now, out, head, reserve, 0)
  out[head] = allowed and 1 or 0
  if allowed then
    commit_key(entry, policy, plan, lease_id, ttl, now)
  end
  exact_figures(out, head + 1, #out)
end

-- reserve (reserveKey): a zero-cost look gives the permits left; min(max, least left) is
-- charged all-or-nothing, or nothing when fewer than min_permits are left. Appends G, then as
-- consume.
local function op_reserve(entry, policy, min_permits, max_permits, hold, now, out)
  entry_align(entry, policy, now)
  evaluate_key(entry, policy, 0, '', now, PEEK, 0, 0, 0)
  local left = max_permits
  for a = 2, 4 * #policy.limits, 4 do
    left = min(left, PEEK[a])
  end
  local granted = 0
  if left >= min_permits and left > 0 then
    granted = left
  end
  local head = #out + 1
  out[head], out[head + 1] = 0, 0
  local allowed, plan, ttl = evaluate_key(entry, policy, granted == 0 and min_permits or granted, '', now, out, head + 1, 0, hold)
  if granted > 0 and allowed then
    commit_key(entry, policy, plan, '', ttl, now)
  else
    granted = 0
  end
  out[head], out[head + 1] = granted, granted > 0 and 1 or 0
  exact_figures(out, head + 2, #out)
end

-- adjust: charges delta more permits (negative: refund) on every rate limit, unconditionally;
-- concurrency leases are kept as they are. Appends 0.
local function op_adjust(entry, policy, delta, stamp, now, out)
  entry_align(entry, policy, now)
  local limits = policy.limits
  local states = entry.states
  local ttl = 0
  for i = 1, #limits do
    local limit = limits[i]
    local state = states[limit.id]
    if limit.code == concurrency.code then
      ttl = concurrency.adjust_ttl(entry, state, now, ttl)
      NEXTS[i] = state
    else
      local next_state, limit_ttl = RATE[limit.code].adjust(normalize_state(state, now, limit), delta, now, limit, stamp)
      ttl = max(ttl, limit_ttl)
      NEXTS[i] = next_state
    end
  end
  entry_write(entry, policy, NEXTS, now + ttl)
  out[#out + 1] = 0
end

-- renew (op 3) or release (op 4) of a lease; an absent key holds no lease and is left absent.
-- Appends 1 if the lease was live (and is now extended or freed), else 0.
local function op_lease(entry, policy, op, lease_id, ttl_ms, now, out)
  entry_align(entry, policy, now)
  if entry.exp == nil then
    out[#out + 1] = 0
    return
  end
  local limit = policy.limits[policy.concurrency]
  local state = entry.states[limit.id]
  local found, ttl
  if op == 3 then
    found, state, ttl = concurrency.renew(entry, state, lease_id, now, ttl_ms)
  else
    found, state, ttl = concurrency.release(entry, state, lease_id, now)
  end
  entry.states[limit.id] = state
  entry.exp, entry.dirty = ceil(max(entry.exp, now + ttl)), true
  out[#out + 1] = found and 1 or 0
end
