-- Entries: the state of one Sluice key, mirroring the MemoryStore's entries
-- (packages/core/src/store/memory-store.ts, key-table.ts). An entry is read once per call, changed in
-- Lua by every item that names it, in order, and written back once at the end.
--
-- Stored value of the state key (STRING, cmsgpack), the layout of protocol 1 with one more pair
-- since protocol 4, so that every version reads every other's keys during a rolling deploy:
--   {expires_at, gc_at, id1, state1, id2, state2, ..., "!b", ledger}
--   expires_at  the entry's logical end (ms, Redis clock): at or after it the entry counts as
--               absent, exactly like MemoryStore's expiresAt.
--   gc_at       when Redis' own expiry (PX) removes the key, as of the write that set it. It
--               stays at least GC_SAFETY_MS past expires_at, so Redis never removes a live
--               entry; writes that keep within it leave the PX alone (SET KEEPTTL costs half a
--               SET PX), and the permit keys share it.
--   id, state   one limit's state per limit id: a rate state ({code, ...} as in the TypeScript)
--               or {6, total} for a concurrency limit whose held permits live in lkey/ckey.
--   "!b", ledger the key's bookings (lib/booking.lua), only while it holds some; "!b" is no limit
--               id (ids match ^[%w_.:%-]+$). ledger = {7, policy_text, newest, marks, id1, cost1,
--               start1, end1, id2, ...}: the policy argument they were made under, the newest
--               booking's id while nothing else was charged since ('' when not known), the states
--               the newest booking left (aligned with the policy's limits: a token bucket's or
--               GCRA's state, false for the others), then the bookings in the order they were
--               made. Since protocol 5 a booking's id is stored as "<id> <token>" (neither has
--               a space): version 4 then finds no booking under a bare id (its claims answer
--               missing, and it keeps the pair as it is), and a booking stored without a token
--               (by version 4) has the token '', which no call can show. Versions before 4 read the pair as a state of an unknown limit id and drop
--               it at the first operation they apply to the key (and a fixed window's booked
--               windows ahead with it): the bookings are lost (their claims find nothing) and no
--               more is admitted (a token bucket's or GCRA's charges stay; a booked window's
--               count goes with the bookings it held).

-- How far past expires_at a new PX reaches, and how close to it a write may come before the
-- PX is set again. Redis' expiry clock is the script's start in whole ms, a few ms at most from
-- TIME; the slack covers that many times over.
local GC_MARGIN_MS = 2000
local GC_SAFETY_MS = 1000
-- Longest PX ever set (about 300 years): a token bucket in debt can ask for more than int64 ms.
local MAX_GC_MS = 1e13

-- The id of the ledger's pair in a stored value, and the code its table starts with (6 and
-- below are limit codes).
local LEDGER_ID = '!b'
local LEDGER_CODE = 7

-- A ledger as the operations use it: {policy, newest, marks, list}, list holding {id, token,
-- cost, start, stop} tables in the order the bookings were made; nil when t is not a stored ledger.
local function ledger_decode(t)
  local n = #t
  if t[1] ~= LEDGER_CODE or type(t[2]) ~= 'string' or type(t[3]) ~= 'string' or type(t[4]) ~= 'table' or n < 8 or n % 4 ~= 0 then
    return nil
  end
  local list = {}
  for i = 5, n, 4 do
    local id, cost, start, stop = t[i], t[i + 1], t[i + 2], t[i + 3]
    if type(id) ~= 'string' or type(cost) ~= 'number' or type(start) ~= 'number' or type(stop) ~= 'number' then
      return nil
    end
    -- "<id> <token>" (protocol 5 on); a bare id was stored by protocol 4, without a token.
    local space = find(id, ' ', 1, true)
    local token = ''
    if space ~= nil then
      id, token = sub(id, 1, space - 1), sub(id, space + 1)
    end
    list[#list + 1] = { id = id, token = token, cost = cost, start = start, stop = stop }
  end
  return { policy = t[2], newest = t[3], marks = t[4], list = list }
end

local function ledger_encode(ledger)
  local t = { LEDGER_CODE, ledger.policy, ledger.newest, ledger.marks }
  for _, b in ipairs(ledger.list) do
    local n = #t
    t[n + 1], t[n + 2], t[n + 3], t[n + 4] = b.id .. ' ' .. b.token, b.cost, b.start, b.stop
  end
  return t
end

-- Reads a stored value into `states` (by id); returns expires_at, gc_at and the ledger (nil
-- when none), or nil when the value is not one this script writes.
local function entry_decode(raw, states)
  local ok, blob = pcall(msgpack_unpack, raw)
  if not ok or type(blob) ~= 'table' or type(blob[1]) ~= 'number' or type(blob[2]) ~= 'number' then
    return nil
  end
  local ledger
  for i = 3, #blob, 2 do
    local id, state = blob[i], blob[i + 1]
    if type(id) ~= 'string' or type(state) ~= 'table' or type(state[1]) ~= 'number' then
      return nil
    end
    if id == LEDGER_ID then
      ledger = ledger_decode(state)
      if ledger == nil then
        return nil
      end
    else
      states[id] = state
    end
  end
  return blob[1], blob[2], ledger
end

-- When the next write of an entry ending at expires_at must reset the key's PX: returns the
-- gc_at to store and the PX to set, or gc_at and nil when the current PX still covers it.
local function entry_gc(expires_at, gc_at, now)
  if gc_at ~= nil and expires_at + GC_SAFETY_MS <= gc_at then
    return gc_at, nil
  end
  local px = min(ceil(expires_at - now), MAX_GC_MS) + GC_MARGIN_MS
  return now + px, px
end

-- Writes a value with the PX entry_gc chose (nil: keep the key's PX).
local function entry_set(skey, value, px)
  if px == nil then
    rcall('SET', skey, value, 'KEEPTTL')
  else
    rcall('SET', skey, value, 'PX', px)
  end
end

-- An entry from the value GET answered for skey (raw: a string, false when absent, or an error
-- reply table); lkey and ckey are its permit keys when declared.
local function entry_from(raw, skey, lkey, ckey)
  local entry = { skey = skey, lkey = lkey, ckey = ckey, states = {}, exp = nil, dirty = false, aligned = nil, ledger = nil }
  if type(raw) == 'table' then
    -- An error reply (WRONGTYPE): the key belongs to someone else.
    entry.corrupt = true
    return entry
  end
  if not raw then
    return entry
  end
  local exp, gc, ledger = entry_decode(raw, entry.states)
  if exp == nil then
    entry.states = {}
    entry.corrupt = true
    return entry
  end
  entry.exp, entry.gc, entry.ledger = exp, gc, ledger
  return entry
end

-- Permit keys are declared only for keys whose policy has a concurrency limit. When they are
-- not, the held permits of a dropped state are left to expire with their own PX: nothing reads them
-- again, since a new concurrency state always starts by deleting them (concurrency.commit).
local function entry_drop_permits(entry)
  if entry.lkey ~= nil then
    rcall('DEL', entry.lkey, entry.ckey)
  end
end

-- Brings the entry in line with the policy before an operation reads entry.states[limit.id]
-- (MemoryStore #read): an expired entry is dropped, its ledger with it; states of limits no
-- longer in the policy, or that changed between rate and concurrency, are dropped; the
-- algorithms convert the rest. The ledger is kept here: open_bookings drops one made under
-- another policy.
local function entry_align(entry, policy, now)
  if entry.exp == nil then
    return
  end
  -- Checked on every read: an entry written earlier in the call with a zero ttl ends at now.
  if entry.exp <= now then
    for _, state in pairs(entry.states) do
      if state[1] == concurrency.code then
        entry_drop_permits(entry)
      end
    end
    entry.states, entry.exp, entry.dirty, entry.aligned, entry.ledger = {}, nil, true, nil, nil
    return
  end
  if entry.aligned == policy then
    return
  end
  for id, state in pairs(entry.states) do
    local limit = policy.by_id[id]
    local was_concurrency = state[1] == concurrency.code
    if limit == nil or was_concurrency ~= (limit.code == concurrency.code) then
      if was_concurrency then
        entry_drop_permits(entry)
      end
      entry.states[id] = nil
      entry.dirty = true
    end
  end
  entry.aligned = policy
end

-- Stores the states `nexts` (aligned with the policy's limits; nil: no state) on an aligned
-- entry. Like MemoryStore, the entry's end is kept in whole milliseconds, rounded up.
local function entry_write(entry, policy, nexts, expires_at)
  local states = entry.states
  local limits = policy.limits
  for i = 1, #limits do
    states[limits[i].id] = nexts[i]
  end
  entry.exp, entry.dirty, entry.aligned = ceil(expires_at), true, policy
end

-- The expiry an operation's write gives the entry (keepUntil in memory-store.ts): what it needs,
-- and no less than an entry holding bookings had (their charges and spans outlive the
-- operation's own figures). An entry with a ledger always has an expiry.
local function entry_keep(entry, needed)
  if entry.ledger ~= nil then
    return max(needed, entry.exp)
  end
  return needed
end

local function entry_flush(entry, now)
  if not entry.dirty or entry.corrupt then
    return
  end
  -- Dropped (it expired and nothing wrote it again): delete it. An entry whose limits hold no
  -- state is kept until it ends, as the MemoryStore keeps it (a renew or release still finds it).
  if entry.exp == nil then
    rcall('DEL', entry.skey)
    return
  end
  local gc, px = entry_gc(entry.exp, entry.gc, now)
  local blob = { entry.exp, gc }
  local has_permits = false
  for _, limit in ipairs(entry.aligned.limits) do
    local state = entry.states[limit.id]
    if state ~= nil then
      blob[#blob + 1] = limit.id
      blob[#blob + 1] = state
      has_permits = has_permits or state[1] == concurrency.code
    end
  end
  if entry.ledger ~= nil then
    blob[#blob + 1] = LEDGER_ID
    blob[#blob + 1] = ledger_encode(entry.ledger)
  end
  entry_set(entry.skey, msgpack_pack(blob), px)
  if has_permits and entry.lkey ~= nil then
    -- Permit keys may have been emptied (deleted) and created again: always give them the PX.
    local permit_px = ceil(gc - now)
    rcall('PEXPIRE', entry.lkey, permit_px)
    rcall('PEXPIRE', entry.ckey, permit_px)
  end
end
