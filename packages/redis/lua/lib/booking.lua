-- Bookings (deferred admission), mirroring packages/core/src/store/booking.ts: a caller denied now may
-- book the earliest slot at which its permits will be free, after every slot already promised,
-- and claim it in its span [start, end) without competing; a booking never claimed expires and
-- gives its permits back where the algorithm's bound allows (each algorithm's book, unbook and
-- claim).
--
-- The ledger is entry.ledger (its stored form in lib/entry.lua): {policy, newest, marks, list},
-- list holding {id, token, cost, start, stop} in the order the bookings were made (stop is the
-- TS end, a Lua keyword). A held booking answers only the call that shows its token. These functions change the entry in place (states, ledger, dirty), as the
-- TypeScript changes its BookingState; a ledger is replaced rather than changed, so a loop over
-- an earlier list is undisturbed.

-- How many times the slot search may move forward before it gives up (MAX_SLOT_STEPS).
local MAX_SLOT_STEPS = 16

-- Outcome codes of a booking call: the indexes of BOOK_OUTCOMES in packages/core, from 0.
local BOOK_ADMITTED, BOOK_BOOKED, BOOK_CLAIMED, BOOK_DENIED, BOOK_MISSING = 0, 1, 2, 3, 4

-- True when state a is mark b, number for number (sameState); a mark is false for limits that
-- keep none.
local function same_state(a, b)
  if a == nil or type(b) ~= 'table' then
    return a == nil and type(b) ~= 'table'
  end
  local n = #a
  if n ~= #b then
    return false
  end
  for i = 1, n do
    if a[i] ~= b[i] then
      return false
    end
  end
  return true
end

local function find_booking(ledger, id)
  if ledger ~= nil then
    for _, b in ipairs(ledger.list) do
      if b.id == id then
        return b
      end
    end
  end
  return nil
end

-- Removes booking b (remove()): no ledger once it holds none, and the newest is no longer known
-- once it is gone.
local function remove_booking(entry, b)
  local ledger = entry.ledger
  local list = {}
  for _, x in ipairs(ledger.list) do
    if x ~= b then
      list[#list + 1] = x
    end
  end
  if #list == 0 then
    entry.ledger = nil
  else
    local newest = ledger.newest
    if newest == b.id then
      newest = ''
    end
    entry.ledger = { policy = ledger.policy, newest = newest, marks = ledger.marks, list = list }
  end
  entry.dirty = true
end

-- Gives an unclaimed booking's permits back (giveBack) and removes it. A token bucket or GCRA
-- gives back only the newest booking, and only while its state is still the one that booking
-- left (nothing was charged since).
local function give_back(entry, policy, b, now)
  local ledger = entry.ledger
  local limits, states = policy.limits, entry.states
  local newest = ledger.newest == b.id
  for i = 1, #limits do
    local code = limits[i].code
    if newest and (code == token_bucket.code or code == gcra.code) and not same_state(states[limits[i].id], ledger.marks[i]) then
      newest = false
    end
  end
  for i = 1, #limits do
    local limit = limits[i]
    states[limit.id] = (limit.rate.unbook(normalize_state(states[limit.id], now, limit), b.cost, b.start, b.stop, now, limit, newest))
  end
  remove_booking(entry, b)
end

-- openBookings(), run by every operation on an aligned entry before it reads the states: a
-- ledger made under another policy is dropped (its charges were converted with the rest of the
-- state), and expired bookings are given back, so no other refund can take a booking's charge
-- for its own. The entry's expiry is left as it is.
local function open_bookings(entry, policy, now)
  local ledger = entry.ledger
  if ledger == nil then
    return
  end
  if ledger.policy ~= policy.text then
    entry.ledger, entry.dirty = nil, true
    return
  end
  local list = ledger.list
  for i = 1, #list do
    if list[i].stop <= now then
      give_back(entry, policy, list[i], now)
    end
  end
end

-- A booking claimed at now: each limit moves or keeps its charge (claim), and it is removed.
local function claim_booking(entry, policy, b, now)
  local limits, states = policy.limits, entry.states
  for i = 1, #limits do
    local limit = limits[i]
    states[limit.id] = (limit.rate.claim(normalize_state(states[limit.id], now, limit), b.cost, b.stop, now, limit))
  end
  remove_booking(entry, b)
end

-- The slot a booking of cost gets (findSlot): the earliest start every limit allows (moved
-- forward until they agree) and the span the strictest one allows from there; start and end, or
-- nil when there is none within the bounds.
local function find_slot(entry, policy, cost, now, bounds)
  local ledger = entry.ledger
  if (ledger ~= nil and #ledger.list or 0) >= bounds.max_bookings then
    return nil
  end
  -- The key's share (bookedCap): what its bookings hold, with this one, within max_booked.
  local held = cost
  if ledger ~= nil then
    for _, b in ipairs(ledger.list) do
      held = held + b.cost
    end
  end
  if held > bounds.max_booked then
    return nil
  end
  local max_ahead, claim_window = bounds.max_ahead, bounds.claim_window
  local limits, states = policy.limits, entry.states
  local start, agreed, step = now, false, 0
  while step < MAX_SLOT_STEPS and not agreed do
    local next_start = start
    for i = 1, #limits do
      local limit = limits[i]
      next_start = max(next_start, limit.rate.start_of(normalize_state(states[limit.id], now, limit), cost, start, now, limit))
    end
    agreed = next_start == start
    start = next_start
    step = step + 1
  end
  if not agreed or not (start - now <= max_ahead) then
    return nil
  end
  local span = claim_window
  for i = 1, #limits do
    local limit = limits[i]
    span = min(span, limit.rate.claim_span(normalize_state(states[limit.id], now, limit), cost, start, now, limit))
  end
  -- A span under a millisecond could not be claimed in practice: no booking then.
  if not (span >= 1) then
    return nil
  end
  return start, start + span
end

-- Ends a booking call's reply: its outcome at head, the statuses after it (exact figures), then
-- the booking's start and end for booked and claimed. Those are any doubles on Redis' clock, so
-- they go as strings of 17 significant digits, which name every double exactly (an integer
-- reply would drop the fraction).
local function book_reply(out, head, outcome, booking)
  out[head] = outcome
  exact_figures(out, head + 1, #out)
  if booking ~= nil then
    local n = #out
    out[n + 1], out[n + 2] = fmt(booking.start), fmt(booking.stop)
  end
end

-- bookKey() on an aligned, opened entry (see op_book): claims the booking held under id once
-- due, else admits now if the key has room, else books the earliest slot; create false only
-- claims. Appends the outcome, per limit a, m, t, s (the cost judged now as a consume would
-- judge it, or what is left after a claim), then start and end for booked and claimed; or only
-- ERR_BOOKING_TOKEN when id is held under another token. When it changes the key, its expiry
-- becomes the latest of the entry's and what the change needs. bounds: {max_ahead,
-- claim_window, max_bookings, max_booked}.
local function book_key(entry, policy, cost, id, token, create, bounds, now, out)
  local held = find_booking(entry.ledger, id)
  -- A booking stored without a token (protocol 4) answers no call: its token is ''.
  if held ~= nil and (held.token == '' or held.token ~= token) then
    out[#out + 1] = ERR_BOOKING_TOKEN
    return
  end
  local head = #out + 1
  -- Filled first so the reply stays a sequence (no holes) while statuses are written after it.
  out[head] = 0
  if held ~= nil then
    if now < held.start then
      evaluate_key(entry, policy, cost, '', now, out, head, 0, 0)
      return book_reply(out, head, BOOK_BOOKED, held)
    end
    claim_booking(entry, policy, held, now)
    evaluate_key(entry, policy, 0, '', now, out, head, 0, 0)
    -- Claimed permits were set aside for this caller: admitted, whatever is left.
    for a = head + 1, #out, 4 do
      out[a], out[a + 2] = 1, 0
    end
    return book_reply(out, head, BOOK_CLAIMED, held)
  end
  local allowed, _, ttl = evaluate_key(entry, policy, cost, '', now, out, head, 0, 0)
  if not create then
    return book_reply(out, head, BOOK_MISSING)
  end
  if allowed then
    entry_write(entry, policy, NEXTS, max(entry.exp or 0, now + ttl))
    -- Charged after the newest booking: a token bucket or GCRA can no longer give that one back.
    if entry.ledger ~= nil then
      entry.ledger.newest = ''
    end
    return book_reply(out, head, BOOK_ADMITTED)
  end
  local start, stop = find_slot(entry, policy, cost, now, bounds)
  if start == nil then
    return book_reply(out, head, BOOK_DENIED)
  end
  local limits, states = policy.limits, entry.states
  local keep = stop
  for i = 1, #limits do
    local limit = limits[i]
    local next_state, limit_ttl = limit.rate.book(normalize_state(states[limit.id], now, limit), cost, start, stop, now, limit)
    states[limit.id] = next_state
    keep = max(keep, now + limit_ttl)
  end
  local marks = {}
  for i = 1, #limits do
    local code = limits[i].code
    marks[i] = (code == token_bucket.code or code == gcra.code) and states[limits[i].id] or false
  end
  local booking = { id = id, token = token, cost = cost, start = start, stop = stop }
  local list = {}
  if entry.ledger ~= nil then
    for i, b in ipairs(entry.ledger.list) do
      list[i] = b
    end
  end
  list[#list + 1] = booking
  entry.ledger = { policy = policy.text, newest = id, marks = marks, list = list }
  entry.exp, entry.dirty, entry.aligned = ceil(max(entry.exp or 0, keep)), true, policy
  return book_reply(out, head, BOOK_BOOKED, booking)
end

-- cancelBooking(): gives back the booking held under id; true if there was one, false if not,
-- nil (nothing changed) if it is held under another token.
local function cancel_booking(entry, policy, id, token, now)
  local held = find_booking(entry.ledger, id)
  if held == nil then
    return false
  end
  if held.token == '' or held.token ~= token then
    return nil
  end
  give_back(entry, policy, held, now)
  return true
end
