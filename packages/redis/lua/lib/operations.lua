-- The operations an item can ask for, mirroring reserveKey()/adjustKey() in
-- packages/core/src/store/evaluate.ts, bookKey()/cancelBooking() in booking.ts and the MemoryStore
-- methods around them. Results are appended to one flat reply (see batch.lua's header); per-item
-- tables are avoided on purpose, as allocation is a large part of a decision's cost in Redis' Lua.

-- Scratch table reused by every item: the statuses of reserve's zero-cost look.
local PEEK = {}

-- Every operation opens the key's bookings right after aligning it (MemoryStore #settle): see
-- open_bookings. Its write then keeps the entry at least as long as its bookings (entry_keep).

-- Charges an allowed evaluation: the concurrency plan, then the states in NEXTS.
local function commit_key(entry, policy, plan, permit_id, ttl, now)
  if policy.concurrency ~= nil then
    NEXTS[policy.concurrency] = concurrency.commit(entry, plan, permit_id, now)
  end
  entry_write(entry, policy, NEXTS, entry_keep(entry, now + ttl))
end

-- consume: all-or-nothing over the key's limits, `core_share` of each kept for core traffic. Appends A, then
-- per limit a, m, t, s.
local function op_consume(entry, policy, cost, permit_id, core_share, now, out)
  entry_align(entry, policy, now)
  open_bookings(entry, policy, now)
  local head = #out + 1
  -- Filled first so the reply stays a sequence (no holes) while statuses are written after it.
  out[head] = 0
  local allowed, plan, ttl = evaluate_key(entry, policy, cost, permit_id, now, out, head, core_share, 0)
  out[head] = allowed and 1 or 0
  if allowed then
    commit_key(entry, policy, plan, permit_id, ttl, now)
  end
  exact_figures(out, head + 1, #out)
end

-- reserve (reserveKey): a zero-cost look gives the permits left; min(max, least left) is
-- charged all-or-nothing, or nothing when fewer than min_permits are left. Appends G, then as
-- consume.
local function op_reserve(entry, policy, min_permits, max_permits, hold, now, out)
  entry_align(entry, policy, now)
  open_bookings(entry, policy, now)
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
-- held permits are kept as they are. Appends 0.
local function op_adjust(entry, policy, delta, stamp, now, out)
  entry_align(entry, policy, now)
  open_bookings(entry, policy, now)
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
  entry_write(entry, policy, NEXTS, entry_keep(entry, now + ttl))
  out[#out + 1] = 0
end

-- renew (op 3) or release (op 4) of a permit; an absent key holds no permit and is left absent.
-- Appends 1 if the permit was live (and is now extended or freed), else 0.
local function op_permit(entry, policy, op, permit_id, ttl_ms, now, out)
  entry_align(entry, policy, now)
  if entry.exp == nil then
    out[#out + 1] = 0
    return
  end
  -- A ledger is never made under a policy with a concurrency limit: this drops it.
  open_bookings(entry, policy, now)
  local limit = policy.limits[policy.concurrency]
  local state = entry.states[limit.id]
  local found, ttl
  if op == 3 then
    found, state, ttl = concurrency.renew(entry, state, permit_id, now, ttl_ms)
  else
    found, state, ttl = concurrency.release(entry, state, permit_id, now)
  end
  entry.states[limit.id] = state
  entry.exp, entry.dirty = ceil(max(entry.exp, now + ttl)), true
  out[#out + 1] = found and 1 or 0
end

-- book (MemoryStore.book, op 7): bookKey() on the aligned, opened entry. Appends O (0 admitted,
-- 1 booked, 2 claimed, 3 denied, 4 missing), then per limit a, m, t, s, then the booking's start
-- and end when O is 1 or 2 (or ERR_BOOKING_TOKEN alone). `create` false only claims.
local function op_book(entry, policy, cost, id, token, create, bounds, now, out)
  entry_align(entry, policy, now)
  open_bookings(entry, policy, now)
  book_key(entry, policy, cost, id, token, create, bounds, now, out)
end

-- cancel (MemoryStore.cancel, op 8): a key without bookings is left as it is. Appends 1 if the
-- booking was held (its permits are given back where the bound allows), else 0; or
-- ERR_BOOKING_TOKEN when it is held under another token (nothing of it changes).
local function op_cancel(entry, policy, id, token, now, out)
  entry_align(entry, policy, now)
  local found = false
  if entry.ledger ~= nil then
    open_bookings(entry, policy, now)
    found = cancel_booking(entry, policy, id, token, now)
  end
  if found == nil then
    out[#out + 1] = ERR_BOOKING_TOKEN
    return
  end
  out[#out + 1] = found and 1 or 0
end
