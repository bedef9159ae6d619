-- Reads and checks a call's keys and arguments (KEYS and ARGV, layout in batch.lua's header)
-- before anything is touched. The client validates everything first, so a failure here means a
-- client/script mismatch.

-- True when v is an integer number in [lo, hi].
local function is_int(v, lo, hi)
  return type(v) == 'number' and v == floor(v) and v >= lo and v <= hi
end

-- argv[i] as an integer in [lo, hi], or nil.
local function int_arg(argv, i, lo, hi)
  local s = argv[i]
  if s == nil then
    return nil
  end
  local n = tonumber(s)
  if n == nil or n ~= floor(n) or n < lo or n > hi then
    return nil
  end
  return n
end

-- Bounds of each op's amount: consume, adjust, renew, release, reserve.
local AMOUNT_BOUNDS = {
  { 0, MAX_COST },
  { -MAX_COST, MAX_COST },
  { 1, MAX_PERMIT_TTL_MS },
  { 0, 0 },
  { 1, MAX_COST },
}

-- Values per item in the items array: six, four for a one-limit consume (op 6), eleven for a
-- booking (op 7), seven for a cancel (op 8).
local ITEM_WIDTH = 6
local FAST_ITEM_WIDTH = 4
local BOOK_ITEM_WIDTH = 11
local CANCEL_ITEM_WIDTH = 7

-- The width of a booking item (op 7 or 8).
local function booking_width(op)
  return op == 7 and BOOK_ITEM_WIDTH or CANCEL_ITEM_WIDTH
end

-- Longest policy argument: MAX_LIMITS limits of 7 fields, each well under 100 characters.
local MAX_POLICY_LENGTH = 1024

-- Limit codes whose state is three numbers ({code, a, b}), which the fast path (lib/fast.lua)
-- takes: token bucket, GCRA and fixed window.
local FAST_CODES = { [1] = true, [2] = true, [4] = true }

-- Splits a policy argument at its commas; nil if it is too long or has an empty field.
local function policy_fields(text)
  if #text > MAX_POLICY_LENGTH then
    return nil
  end
  local fields, from = {}, 1
  while true do
    local comma = find(text, ',', from, true)
    local field = sub(text, from, comma and comma - 1 or #text)
    if field == '' then
      return nil
    end
    fields[#fields + 1] = field
    if comma == nil then
      return fields
    end
    from = comma + 1
  end
end

-- Reads one policy argument (7 fields per limit, see batch.lua's header); returns the policy,
-- or nil and the index (1..L) of the limit at fault (0: the argument as a whole).
local function parse_policy(text)
  local fields = policy_fields(text)
  local limit_count = fields and #fields / 7
  if limit_count == nil or limit_count < 1 or limit_count > MAX_LIMITS or limit_count ~= floor(limit_count) then
    return nil, 0
  end
  -- text: what a key's bookings remember (policyText in packages/core), to notice a change.
  local policy = { text = text, limits = {}, by_id = {}, concurrency = nil, fast = nil }
  local at = 1
  for j = 1, limit_count do
    local code = int_arg(fields, at, 1, 6)
    local limit = {
      code = code,
      limit = int_arg(fields, at + 1, 1, code == sliding_log.code and MAX_LOG_LIMIT or MAX_LIMIT),
      window_ms = int_arg(fields, at + 2, 1, MAX_WINDOW_MS),
      burst = int_arg(fields, at + 3, 1, MAX_LIMIT),
      slices = int_arg(fields, at + 4, 1, MAX_SLICES),
      permit_ttl_ms = int_arg(fields, at + 5, MIN_PERMIT_TTL_MS, MAX_PERMIT_TTL_MS),
      id = fields[at + 6],
    }
    local id = limit.id
    if
      code == nil
      or limit.limit == nil
      or limit.window_ms == nil
      or limit.burst == nil
      or limit.slices == nil
      or limit.permit_ttl_ms == nil
      or #id > MAX_ID_LENGTH
      or not find(id, '^[%w_.:%-]+$')
      or policy.by_id[id] ~= nil
      or (code == concurrency.code and policy.concurrency ~= nil)
    then
      return nil, j
    end
    if code == concurrency.code then
      policy.concurrency = j
    end
    -- capacityOf() in packages/core/src/shared/policy.ts: what a core share is a share of.
    limit.capacity = (code == token_bucket.code or code == gcra.code) and limit.burst or limit.limit
    -- The rate algorithm's functions (nil for concurrency), looked up once.
    limit.rate = RATE[code]
    policy.limits[j] = limit
    policy.by_id[id] = limit
    at = at + 7
  end
  if limit_count == 1 and FAST_CODES[policy.limits[1].code] then
    policy.fast = policy.limits[1]
  end
  return policy
end

-- A booking id (checkBookingId in packages/core): 1 to MAX_BOOKING_ID_LENGTH printable ASCII
-- characters, no spaces.
local function is_booking_id(id)
  return type(id) == 'string' and #id <= MAX_BOOKING_ID_LENGTH and find(id, '^[!-~]+$') ~= nil
end

-- A booking token (checkBookingToken): as an id, of MIN_BOOKING_TOKEN_LENGTH characters or
-- more; or '' (a call that shows none: it can only find that no booking is held).
local function is_booking_token(token)
  return token == '' or (is_booking_id(token) and #token >= MIN_BOOKING_TOKEN_LENGTH)
end

-- True when items[at..] is a well-formed booking (op 7: op, policy, group, cost, id, create,
-- max_ahead_ms, claim_window_ms, max_bookings, max_booked, token) or cancel (op 8: op, policy,
-- group, 0, id, 0, token) of a known policy and group. A policy with a concurrency limit is refused later, as an item
-- (ERR_NOT_BOOKABLE), so it needs no permit keys here.
local function is_booking_item(items, at, last, policies, group_count)
  local op, group = items[at], items[at + 2]
  if
    at + booking_width(op) - 1 > last
    or policies[items[at + 1]] == nil
    or not is_int(group, 1, group_count)
    or not is_booking_id(items[at + 4])
  then
    return false
  end
  if op == 8 then
    return items[at + 3] == 0 and items[at + 5] == 0 and is_booking_token(items[at + 6])
  end
  return is_int(items[at + 3], 0, MAX_COST)
    and (items[at + 5] == 0 or items[at + 5] == 1)
    and is_int(items[at + 6], 1, MAX_AHEAD_MS)
    and is_int(items[at + 7], 1, MAX_CLAIM_WINDOW_MS)
    and is_int(items[at + 8], 1, MAX_BOOKINGS)
    and is_int(items[at + 9], 0, MAX_COST)
    and is_booking_token(items[at + 10])
end

-- Policies already read, by their argument. A function library keeps this from call to call, so
-- a policy is read once and then found by one table lookup (a script starts every call with an
-- empty one). Policies are never changed once read. Emptied when full: a service's rules make a
-- bounded set of them.
local policy_cache, policy_cache_size = {}, 0
local MAX_CACHED_POLICIES = 1000

-- The policy of a policy argument: read once, then found in policy_cache; or nil and the index
-- (1..L) of the limit at fault (0: the argument as a whole).
local function cached_policy(text)
  local policy = policy_cache[text]
  if policy ~= nil then
    return policy
  end
  local fault
  policy, fault = parse_policy(text)
  if policy == nil then
    return nil, fault
  end
  if policy_cache_size >= MAX_CACHED_POLICIES then
    policy_cache, policy_cache_size = {}, 0
  end
  policy_cache[text], policy_cache_size = policy, policy_cache_size + 1
  return policy
end

-- Returns the policies, the keys index of each group's permit keys (by group; nil when not
-- declared) and the items (a flat array, ITEM_WIDTH, FAST_ITEM_WIDTH or booking_width values
-- each); or nil, a code and a message.
local function parse_args(keys, argv)
  if argv[1] ~= PROTOCOL then
    return nil, ERR_PROTOCOL_VERSION, 'the script speaks protocol ' .. PROTOCOL .. ', the call ' .. tostring(argv[1])
  end
  local policy_count = int_arg(argv, 2, 1, MAX_ITEMS)
  if policy_count == nil then
    return nil, ERR_BAD_ARGUMENT, 'ARGV[2]: policy count'
  end
  local at = 3
  local policies = {}
  for p = 1, policy_count do
    local text = argv[at]
    if text == nil then
      return nil, ERR_BAD_ARGUMENT, 'policy ' .. p .. ': missing'
    end
    local policy, fault = cached_policy(text)
    if policy == nil then
      if fault == 0 then
        return nil, ERR_BAD_ARGUMENT, 'policy ' .. p .. ': 7 fields per limit, 1 to ' .. MAX_LIMITS .. ' limits'
      end
      return nil, ERR_BAD_ARGUMENT, 'policy ' .. p .. ', limit ' .. fault
    end
    policies[p] = policy
    at = at + 1
  end

  local permit_count = int_arg(argv, at, 0, MAX_ITEMS)
  local group_count = permit_count and #keys - 2 * permit_count
  if group_count == nil or group_count < 1 or group_count > MAX_ITEMS then
    return nil, ERR_BAD_ARGUMENT, 'KEYS: one per group, two more per group with permit keys'
  end
  local permit_keys = {}
  local previous = 0
  for j = 1, permit_count do
    local group = int_arg(argv, at + j, previous + 1, group_count)
    if group == nil then
      return nil, ERR_BAD_ARGUMENT, 'groups with permit keys: ' .. j
    end
    permit_keys[group] = group_count + 2 * j - 1
    previous = group
  end
  at = at + permit_count + 1
  if at ~= #argv then
    return nil, ERR_BAD_ARGUMENT, 'ARGV: the items must be the last argument'
  end
  local ok, items = pcall(msgpack_unpack, argv[at])
  if not ok or type(items) ~= 'table' then
    return nil, ERR_BAD_ARGUMENT, 'items: not a MessagePack array'
  end
  local at, item_count, last = 1, 0, #items
  while at <= last do
    local op = items[at]
    item_count = item_count + 1
    if op == 6 then
      -- A one-limit consume: op, policy, group, cost (lib/fast.lua).
      local policy, group, cost = policies[items[at + 1]], items[at + 2], items[at + 3]
      if
        at + 3 > last
        or policy == nil
        or policy.fast == nil
        or type(group) ~= 'number'
        or group % 1 ~= 0
        or not (group >= 1 and group <= group_count)
        or type(cost) ~= 'number'
        or cost % 1 ~= 0
        or not (cost >= 0 and cost <= MAX_COST)
      then
        return nil, ERR_BAD_ARGUMENT, 'item ' .. item_count
      end
      at = at + FAST_ITEM_WIDTH
    elseif op == 7 or op == 8 then
      if not is_booking_item(items, at, last, policies, group_count) then
        return nil, ERR_BAD_ARGUMENT, 'item ' .. item_count
      end
      at = at + booking_width(op)
    else
      local group, amount, extra, param = items[at + 2], items[at + 3], items[at + 4], items[at + 5]
      -- Indexing checks op and policy: only the integers 1..5 and 1..P find an entry. The other
      -- checks are written out rather than calls to is_int: this loop runs for every item.
      local bounds, policy = AMOUNT_BOUNDS[op], policies[items[at + 1]]
      if
        at + 5 > last
        or bounds == nil
        or policy == nil
        or type(group) ~= 'number'
        or group % 1 ~= 0
        or not (group >= 1 and group <= group_count)
        or type(amount) ~= 'number'
        or amount % 1 ~= 0
        or not (amount >= bounds[1] and amount <= bounds[2])
        or (op == 5 and not is_int(extra, 0, amount))
        or (op ~= 5 and (type(extra) ~= 'string' or #extra > MAX_PERMIT_ID_LENGTH))
        or ((op == 3 or op == 4) and policy.concurrency == nil)
        or (op == 5 and policy.concurrency ~= nil)
        or (policy.concurrency ~= nil and permit_keys[group] == nil)
        -- The sixth value (param): a number in [0, MAX_CORE_SHARE] for a consume, an integer hold in
        -- [0, MAX_HOLD_MS] for a reserve, a stamp in [0, MAX_STAMP_MS] for an adjust, 0 otherwise
        -- (NaN fails every test).
        or type(param) ~= 'number'
        or not (param >= 0 and param <= (op == 1 and MAX_CORE_SHARE or op == 5 and MAX_HOLD_MS or op == 2 and MAX_STAMP_MS or 0))
        or (op == 5 and param % 1 ~= 0)
      then
        return nil, ERR_BAD_ARGUMENT, 'item ' .. item_count
      end
      at = at + ITEM_WIDTH
    end
  end
  if item_count < 1 or item_count > MAX_ITEMS then
    return nil, ERR_BAD_ARGUMENT, 'items: 1 to ' .. MAX_ITEMS
  end
  return policies, permit_keys, items
end
