-- The fast path: a consume of a policy with one token-bucket, GCRA or fixed-window limit, no
-- core share and no permit (op 6, what most calls are). It decides exactly as op_consume would (the
-- same algorithm functions, the same expiry and normalisation, the same stored value), but keeps
-- the key in a small record instead of an entry (no policy alignment, no per-limit loops) and
-- answers in the short form. Any other item naming the key in the same call turns the record
-- into an entry first (fast_to_entry), so items still apply in order.
--
-- A record: { fast = true, skey, limit (the policy's limit table), state ({code, a, b} or nil),
-- exp, gc (as an entry's), dirty }.

-- A record's stored value, {expires_at, gc_at, id, {code, a, b}}, in a MessagePack layout of its
-- own: every number a float64 and the id a fixstr (under 32 bytes), written and read with struct,
-- which costs Redis' Lua about half what cmsgpack does. It is plain MessagePack, so every
-- version of the program (entry_decode, cmsgpack) reads it as the same numbers:
--   94 | cb expires_at | cb gc_at | a0+n id | 93 | code | cb a | cb b       (40 + n bytes)
local RECORD_HEAD, RECORD_STATE = '>BBdBdB', '>BBBdBd'

local function record_value(record, gc)
  local id, state = record.limit.id, record.state
  if #id >= 32 then
    return msgpack_pack({ record.exp, gc, id, state })
  end
  return struct_pack(RECORD_HEAD, 0x94, 0xcb, record.exp, 0xcb, gc, 0xa0 + #id)
    .. id
    .. struct_pack(RECORD_STATE, 0x93, state[1], 0xcb, state[2], 0xcb, state[3])
end

-- The state, expires_at and gc_at of a stored value holding exactly one state, of `limit`'s id
-- and algorithm; nil otherwise.
local function record_read(raw, limit)
  local id = limit.id
  local n = #id
  if n < 32 and #raw == 40 + n then
    local m1, m2, exp, m3, gc, m4, at = struct_unpack(RECORD_HEAD, raw)
    if m1 == 0x94 and m2 == 0xcb and m3 == 0xcb and m4 == 0xa0 + n and sub(raw, at, at + n - 1) == id then
      local m5, code, m6, a, m7, b = struct_unpack(RECORD_STATE, raw, at + n)
      if m5 == 0x93 and code == limit.code and m6 == 0xcb and m7 == 0xcb then
        return { code, a, b }, exp, gc
      end
    end
  end
  -- The same shape in any other layout (cmsgpack writes whole numbers as integers).
  if byte(raw, 1) == 0x94 then
    local ok, blob = pcall(msgpack_unpack, raw)
    if ok and type(blob) == 'table' and blob[3] == id then
      local state, exp, gc = blob[4], blob[1], blob[2]
      if type(state) == 'table' and state[1] == limit.code and #state == 3 and type(exp) == 'number' and type(gc) == 'number' then
        return state, exp, gc
      end
    end
  end
  return nil
end

-- Opens skey for a fast consume of `limit`: a record when the key is absent or holds exactly
-- one state, of this limit's id and algorithm; otherwise nil and the value GET answered, for
-- entry_from. A key holding bookings is never a record, so every item on it opens its bookings
-- (lib/booking.lua): its value has the ledger pair, so it is 6 values (0x96) with a state, or 4
-- with "!b" where record_read wants the limit's id; and a fixed window with booked windows
-- ahead (a state of more than 3 numbers) is not one either.
local function fast_open(skey, limit)
  local raw = rpcall('GET', skey)
  if raw == false then
    return { fast = true, skey = skey, limit = limit, state = nil, exp = nil, gc = nil, dirty = false }
  end
  if type(raw) == 'string' then
    local state, exp, gc = record_read(raw, limit)
    if state ~= nil then
      return { fast = true, skey = skey, limit = limit, state = state, exp = exp, gc = gc, dirty = false }
    end
  end
  return nil, raw
end

-- Appends a one-limit consume's result in its short form: 1, remaining, reset_after when
-- allowed (retry_after is 0), 0, remaining, retry_after, reset_after when denied. Figures past
-- EXACT_INTEGER go as strings.
local function fast_reply(out, ok, remaining, retry_after, reset_after)
  local n = #out
  if remaining >= EXACT_INTEGER then
    remaining = fmt(remaining)
  end
  if reset_after >= EXACT_INTEGER then
    reset_after = fmt(reset_after)
  end
  if ok then
    out[n + 1], out[n + 2], out[n + 3] = 1, remaining, reset_after
  else
    if retry_after >= EXACT_INTEGER then
      retry_after = fmt(retry_after)
    end
    out[n + 1], out[n + 2], out[n + 3], out[n + 4] = 0, remaining, retry_after, reset_after
  end
end

-- op_consume on a record, for `limit` (the record's own), answered in the short form.
local function fast_consume(record, limit, cost, now, out)
  local state = record.state
  if record.exp ~= nil and record.exp <= now then
    -- Expired: absent, and deleted at the flush unless this call writes it again (entry_align).
    state = nil
    record.state, record.exp, record.dirty = nil, nil, true
  elseif state ~= nil and limit.code == gcra.code then
    -- A record holds this limit's algorithm already (record_read); only GCRA's state also
    -- depends on the limit's parameters (normalize_state).
    state = normalize_state(state, now, limit)
  end
  local ok, remaining, retry_after, reset_after, next_state, ttl = limit.rate.evaluate(state, cost, now, limit, 0)
  if ok then
    record.state, record.exp, record.dirty = next_state, ceil(now + ttl), true
  end
  fast_reply(out, ok, max(0, remaining), retry_after, reset_after)
end

-- op_consume on an entry, for a one-limit consume that found one: answered in the short form.
local function fast_consume_entry(entry, policy, cost, now, out)
  op_consume(entry, policy, cost, '', 0, now, out)
  local n = #out
  local allowed, remaining, retry_after, reset_after = out[n - 4], out[n - 2], out[n - 1], out[n]
  for i = n - 4, n do
    out[i] = nil
  end
  fast_reply(out, allowed == 1, tonumber(remaining), tonumber(retry_after), tonumber(reset_after))
end

-- The entry a record stands for, with the key's permit keys (when declared) for the items to come.
-- A record holds no bookings (fast_open), so neither does the entry: an item that books on it
-- starts the ledger.
local function fast_to_entry(record, lkey, ckey)
  local entry = entry_from(false, record.skey, lkey, ckey)
  if record.state ~= nil then
    entry.states[record.limit.id] = record.state
  end
  entry.exp, entry.gc, entry.dirty = record.exp, record.gc, record.dirty
  return entry
end

-- Writes a record back, as entry_flush would write its entry.
local function fast_flush(record, now)
  if not record.dirty then
    return
  end
  if record.exp == nil then
    rcall('DEL', record.skey)
    return
  end
  local gc, px = entry_gc(record.exp, record.gc, now)
  entry_set(record.skey, record_value(record, gc), px)
end

-- Opens skey for an op 6 item of `policy`: a record, or else the entry of what the key holds,
-- with its permit keys (lkey, ckey) when declared.
local function fast_open_any(skey, policy, lkey, ckey)
  local record, raw = fast_open(skey, policy.fast)
  if record ~= nil then
    return record
  end
  return entry_from(raw, skey, lkey, ckey)
end

-- An op 6 item on what fast_open_any opened (a record of this policy's limit, or an entry),
-- answered in the short form.
local function fast_item(entry, policy, cost, now, out)
  if entry.limit == policy.fast then
    fast_consume(entry, policy.fast, cost, now, out)
  elseif entry.corrupt then
    out[#out + 1] = ERR_CORRUPT_STATE
  else
    fast_consume_entry(entry, policy, cost, now, out)
  end
end

-- Writes back a record or an entry.
local function flush_any(entry, now)
  if entry.fast then
    fast_flush(entry, now)
  else
    entry_flush(entry, now)
  end
end
