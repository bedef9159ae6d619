--[[
sluice batch script, protocol 5: decides a batch of Sluice operations in one call, atomically,
all at one instant of Redis' clock (TIME; the callers' clocks are never used). Items run in
order, so several items for one key see each other's effects exactly as sequential calls would.

The file defines batch(KEYS, ARGV), and consume_one(KEYS, ARGV) for a one-limit consume alone
(see it, after batch), and calls nothing; src/scripts.ts makes it a Redis Functions library
(FUNCTION LOAD; the file runs once, at the first FCALL, and each call runs its entry) or, on
servers without functions, a script per entry that ends with `return batch(KEYS, ARGV)` (EVALSHA:
the whole file runs at every call).

KEYS: one state key per key group g = 1..G (a group is one Sluice key; the caller sends one
      call per Cluster slot), then two permit keys for each group listed in ARGV (see below):
  KEYS[g]          the group's state: STRING, cmsgpack {expires_at, gc_at, id, state, ...,
                   "!b", ledger} (lib/entry.lua; the ledger pair only while it holds bookings)
  KEYS[G + 2j - 1] the j-th listed group's held permits: ZSET permit id -> expires_at (ms)
  KEYS[G + 2j]     their costs: HASH permit id -> permits
  All keys of a group carry the same hash tag. Permit keys are declared (and touched) only for
  groups named by an item whose policy has a concurrency limit.

ARGV:
  [1]  protocol version, "5"
  [2]  P, the number of policies (1..MAX_ITEMS)
  then P policies, one argument each: its L limits (1..8), 7 comma-separated fields each, all
       joined by commas (at most 1024 bytes): code (1 token bucket, 2 gcra, 3 sliding window,
       4 fixed window, 5 sliding log, 6 concurrency), limit, window_ms, burst, slices,
       permit_ttl_ms, id (integers within packages/core's POLICY_BOUNDS; ids unique within the
       policy, at most one concurrency limit). A policy is read once per server and then found
       by its text (lib/args.lua).
  then C, the number of groups with permit keys, and those C groups in increasing order
       (so G = #KEYS - 2C)
  then, as the last argument, the items: one MessagePack array of N (1..MAX_ITEMS) items of 6
       values each (integers, and strings or floats where said): op, policy (1..P), group
       (1..G), amount, extra, param; or of 4 for op 6: op, policy, group, cost; or of 11 for
       op 7: op, policy, group, cost, id, create, max_ahead_ms, claim_window_ms, max_bookings,
       max_booked, token; or of 7 for op 8: op, policy, group, 0, id, 0, token
       param: for a consume, its core share, the share of each limit kept for core traffic (a
       float in 0..MAX_CORE_SHARE: the cost must fit with floor(core share * capacity) more,
       where capacity is the burst of a token bucket or gcra, else the limit); for a reserve,
       the hold in ms (an integer in 0..MAX_HOLD_MS: sliding windows and logs count the permits
       as taken that long after now, when the lease that takes them stops serving them); for
       an adjust, the stamp of the charge a refund is for (a reservation's now + hold, epoch
       ms, or 0 for the newest charges made by now); 0 for every other op
       op 1 consume  amount = cost (0..1e9); extra = the permit id a concurrency limit takes
       op 2 adjust   amount = delta (-1e9..1e9, negative refunds); extra = ""
       op 3 renew    amount = the permit's new lifetime in ms (1..86400000); extra = permit id
       op 4 release  amount = 0; extra = permit id
       op 5 reserve  amount = max permits (1..1e9); extra = min permits (0..max, an integer)
       op 6 consume of a policy of one token bucket, GCRA or fixed window, with no core share
                     (the common call, lib/fast.lua): 4 values, cost (0..1e9)
       op 7 book     (lib/booking.lua) 11 values: cost (0..1e9); id, the booking's name (a string
                     of 1..128 printable ASCII characters, no spaces); create (1: admit, claim
                     or book; 0: only claim); then the resource's bounds, integers:
                     max_ahead_ms (1..3600000), claim_window_ms (1..60000), max_bookings
                     (1..10000) (packages/core's BOOKING_BOUNDS), max_booked (0..1e9, the most
                     permits the key's bookings may hold, packages/core's bookedCap); then the
                     call's token (16..128 printable ASCII characters, no spaces, or '' for
                     none): a booking made keeps it, a held one must match it
       op 8 cancel   7 values: amount = 0; extra = booking id (as op 7's); param = 0; token
       permit ids: at most 256 bytes; renew and release need a policy with a concurrency limit,
       reserve one without; an item whose policy has one needs its group's permit keys (ops 7
       and 8 excepted: they refuse such a policy as an item, ERR_NOT_BOOKABLE)

Returns {0, seconds, microseconds, results...}: the decision time as Redis TIME gave it (now, in
ms, is seconds * 1000 + microseconds / 1000, computed the same way on both sides), then each
item's results, one after the other (the caller knows each item's width):
  consume  A, then per limit in policy order: a, m, t, s. A = 1 if every limit allowed (and
           was charged); a = 1 if the limit allowed; m remaining; t retry_after_ms;
           s reset_after_ms
  op 6     the consume's result in short: 1, m, s when allowed (t is 0), 0, m, t, s when denied
  reserve  G, then as consume: G permits granted (0: none, nothing charged)
  adjust   0
  renew    1 if the permit was live and is extended, else 0
  release  1 if the permit was live and is freed, else 0
  book     O, then per limit a, m, t, s as consume, then when O is 1 or 2 the booking's start and
           end (ms, Redis clock) as strings of 17 significant digits, exact for any double.
           O: 0 admitted (charged now), 1 booked (held, from start), 2 claimed (admitted on the
           booking; every a is 1, t 0), 3 denied, 4 missing (create 0 and no booking)
  cancel   1 if the booking was held and is given back, else 0
  A book or cancel naming a booking held under another token has ERR_BOOKING_TOKEN instead.
  Every op on a key holding bookings first gives back its expired ones (or drops them all when
  they were made under another policy), and its write keeps the key at least as long as it was.
  Figures are integer replies, or exact strings from 2^53 on. An item that could not be
  applied has one value instead: its negative code (lib/codes.lua).
Returns {code, message} with a positive code when the call is malformed; nothing is applied.
]]

-- Globals are read once, here: a library's globals sit behind a metatable (Redis guards them),
-- so a global read at call time costs a metamethod where a local costs an index.
local rcall, rpcall = redis.call, redis.pcall
local floor, ceil, max, min = math.floor, math.ceil, math.max, math.min
local type, tonumber, tostring, pcall, pairs, ipairs, unpack = type, tonumber, tostring, pcall, pairs, ipairs, unpack
local byte, sub, find, format = string.byte, string.sub, string.find, string.format
local tinsert, tremove, tconcat = table.insert, table.remove, table.concat
local msgpack_pack, msgpack_unpack = cmsgpack.pack, cmsgpack.unpack
local struct_pack, struct_unpack = struct.pack, struct.unpack

local PROTOCOL = '5'
local MAX_ITEMS = 4096
local MAX_LIMITS = 8
local MAX_LIMIT = 1000000000
local MAX_LOG_LIMIT = 10000
local MAX_WINDOW_MS = 31622400000
local MAX_SLICES = 100
local MIN_PERMIT_TTL_MS = 10
local MAX_PERMIT_TTL_MS = 86400000
local MAX_COST = 1000000000
local MAX_ID_LENGTH = 64
local MAX_PERMIT_ID_LENGTH = 256
local MAX_CORE_SHARE = 0.9
local MAX_HOLD_MS = 60000
local MAX_STAMP_MS = 1e15
local MAX_BOOKING_ID_LENGTH = 128
local MIN_BOOKING_TOKEN_LENGTH = 16
local MAX_AHEAD_MS = 3600000
local MAX_CLAIM_WINDOW_MS = 60000
local MAX_BOOKINGS = 10000

--@include "lib/codes.lua"
--@include "lib/numeric.lua"
--@include "algorithms/token_bucket.lua"
--@include "algorithms/gcra.lua"
--@include "algorithms/sliding_window.lua"
--@include "algorithms/fixed_window.lua"
--@include "algorithms/sliding_log.lua"
--@include "algorithms/concurrency.lua"
--@include "lib/normalize.lua"
--@include "lib/entry.lua"
--@include "lib/args.lua"

--@include "lib/evaluate.lua"
--@include "lib/booking.lua"
--@include "lib/operations.lua"
--@include "lib/fast.lua"

-- The decision time, now in ms on Redis' clock (TIME), and the reply begun with it: {OK,
-- seconds, microseconds}, the figures as TIME gave them (see the header's Returns).
local function reply_head()
  local time = rcall('TIME')
  return tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000, { OK, time[1], time[2] }
end

-- Decides one batch: KEYS and ARGV as in the header above.
local function batch(keys, argv)
  local policies, permit_keys, items = parse_args(keys, argv)
  if policies == nil then
    -- parse_args returned nil, a code and a message.
    return { permit_keys, items }
  end

  local now, out = reply_head()

  -- By group: an entry, or a fast-path record (lib/fast.lua).
  local entries = {}
  local at, last = 1, #items
  while at <= last do
    local op, policy, group = items[at], policies[items[at + 1]], items[at + 2]
    local entry = entries[group]
    if op == 6 then
      if entry == nil or (entry.fast and entry.limit ~= policy.fast) then
        local permit_at = permit_keys[group]
        local lkey, ckey = permit_at and keys[permit_at], permit_at and keys[permit_at + 1]
        if entry == nil then
          entry = fast_open_any(keys[group], policy, lkey, ckey)
        else
          -- A record of another policy's limit: this item needs the key's whole entry.
          entry = fast_to_entry(entry, lkey, ckey)
        end
        entries[group] = entry
      end
      fast_item(entry, policy, items[at + 3], now, out)
      at = at + FAST_ITEM_WIDTH
    elseif op >= 7 and policy.concurrency ~= nil then
      -- Only rate limits can be booked (bookKey throws): nothing is read or applied.
      out[#out + 1] = ERR_NOT_BOOKABLE
      at = at + booking_width(op)
    else
      local amount, extra, param = items[at + 3], items[at + 4], items[at + 5]
      local permit_at = permit_keys[group]
      if entry == nil then
        entry = entry_from(rpcall('GET', keys[group]), keys[group], permit_at and keys[permit_at], permit_at and keys[permit_at + 1])
      elseif entry.fast then
        -- A record never holds bookings (fast_open), so the entry starts without a ledger.
        entry = fast_to_entry(entry, permit_at and keys[permit_at], permit_at and keys[permit_at + 1])
      end
      entries[group] = entry
      if entry.corrupt then
        out[#out + 1] = ERR_CORRUPT_STATE
      elseif op == 1 then
        op_consume(entry, policy, amount, extra, param, now, out)
      elseif op == 2 then
        op_adjust(entry, policy, amount, param, now, out)
      elseif op == 5 then
        op_reserve(entry, policy, extra, amount, param, now, out)
      elseif op == 7 then
        local bounds = { max_ahead = items[at + 6], claim_window = items[at + 7], max_bookings = items[at + 8], max_booked = items[at + 9] }
        op_book(entry, policy, amount, extra, items[at + 10], param == 1, bounds, now, out)
      elseif op == 8 then
        op_cancel(entry, policy, extra, items[at + 6], now, out)
      else
        op_permit(entry, policy, op, extra, amount, now, out)
      end
      at = at + (op >= 7 and booking_width(op) or ITEM_WIDTH)
    end
  end

  for _, entry in pairs(entries) do
    flush_any(entry, now)
  end

  return out
end

-- A one-limit consume alone (op 6 in a call of its own: a caller with no other call in flight,
-- the commonest call), in a lean form the batch protocol's counts and item string would cost
-- Redis half as much again to read. KEYS[1]: the state key. ARGV[1]: the policy, one token
-- bucket, GCRA or fixed window (as in batch's header); ARGV[2]: the cost, a decimal integer in
-- 0..MAX_COST. Decides and answers exactly as batch does for that one item; a malformed call
-- gets {code, message} and applies nothing.
local function consume_one(keys, argv)
  local skey, text, cost_text = keys[1], argv[1], argv[2]
  if #keys ~= 1 or #argv ~= 2 or find(cost_text, '^%d+$') == nil then
    return { ERR_BAD_ARGUMENT, 'consume_one: one key, then a policy and a cost' }
  end
  local policy = cached_policy(text)
  local cost = tonumber(cost_text)
  if policy == nil or policy.fast == nil or cost > MAX_COST then
    return { ERR_BAD_ARGUMENT, 'consume_one: a policy of one token bucket, GCRA or fixed window, a cost in 0..' .. MAX_COST }
  end

  local now, out = reply_head()
  local entry = fast_open_any(skey, policy, nil, nil)
  fast_item(entry, policy, cost, now, out)
  flush_any(entry, now)
  return out
end
