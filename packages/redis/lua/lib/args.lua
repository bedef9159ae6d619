-- Reads and checks ARGV and KEYS (layout in batch.lua's header) before anything is touched.
-- The client validates everything first, so a failure here means a client/script mismatch.

-- True when v is an integer number in [lo, hi].
local function is_int(v, lo, hi)
  return type(v) == 'number' and v == floor(v) and v >= lo and v <= hi
end

-- ARGV[i] as an integer in [lo, hi], or nil.
local function int_arg(i, lo, hi)
  local s = ARGV[i]
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
  { 1, MAX_LEASE_TTL_MS },
  { 0, 0 },
  { 1, MAX_COST },
}

-- Returns the policies, the KEYS index of each group's lease keys (by group; nil when not
-- declared) and the items (a flat array, five values each); or nil, a code and a message.
local function parse_args()
  if ARGV[1] ~= PROTOCOL then
    return nil, ERR_PROTOCOL_VERSION, 'the script speaks protocol ' .. PROTOCOL .. ', the call ' .. tostring(ARGV[1])
  end
  local policy_count = int_arg(2, 1, MAX_ITEMS)
  if policy_count == nil then
    return nil, ERR_BAD_ARGUMENT, 'ARGV[2]: policy count'
  end
  local at = 3
  local policies = {}
  for p = 1, policy_count do
    local limit_count = int_arg(at, 1, MAX_LIMITS)
    if limit_count == nil then
      return nil, ERR_BAD_ARGUMENT, 'policy ' .. p .. ': limit count'
    end
    at = at + 1
    local policy = { limits = {}, by_id = {}, concurrency = nil }
    for j = 1, limit_count do
      local code = int_arg(at, 1, 6)
      local limit = {
        code = code,
        limit = int_arg(at + 1, 1, code == sliding_log.code and MAX_LOG_LIMIT or MAX_LIMIT),
        window_ms = int_arg(at + 2, 1, MAX_WINDOW_MS),
        burst = int_arg(at + 3, 1, MAX_LIMIT),
        slices = int_arg(at + 4, 1, MAX_SLICES),
        lease_ttl_ms = int_arg(at + 5, MIN_LEASE_TTL_MS, MAX_LEASE_TTL_MS),
        id = ARGV[at + 6],
      }
      local id = limit.id
      if
        code == nil
        or limit.limit == nil
        or limit.window_ms == nil
        or limit.burst == nil
        or limit.slices == nil
        or limit.lease_ttl_ms == nil
        or id == nil
        or #id > MAX_ID_LENGTH
        or not string.find(id, '^[%w_.:%-]+$')
        or policy.by_id[id] ~= nil
        or (code == concurrency.code and policy.concurrency ~= nil)
      then
        return nil, ERR_BAD_ARGUMENT, 'policy ' .. p .. ', limit ' .. j
      end
      if code == concurrency.code then
        policy.concurrency = j
      end
      policy.limits[j] = limit
      policy.by_id[id] = limit
      at = at + 7
    end
    policies[p] = policy
  end

  local lease_count = int_arg(at, 0, MAX_ITEMS)
  local group_count = lease_count and #KEYS - 2 * lease_count
  if group_count == nil or group_count < 1 or group_count > MAX_ITEMS then
    return nil, ERR_BAD_ARGUMENT, 'KEYS: one per group, two more per group with leases'
  end
  local lease_keys = {}
  local previous = 0
  for j = 1, lease_count do
    local group = int_arg(at + j, previous + 1, group_count)
    if group == nil then
      return nil, ERR_BAD_ARGUMENT, 'groups with leases: ' .. j
    end
    lease_keys[group] = group_count + 2 * j - 1
    previous = group
  end
  at = at + lease_count + 1
  if at ~= #ARGV then
    return nil, ERR_BAD_ARGUMENT, 'ARGV: the items must be the last argument'
  end
  local ok, items = pcall(cmsgpack.unpack, ARGV[at])
  if not ok or type(items) ~= 'table' then
    return nil, ERR_BAD_ARGUMENT, 'items: not a MessagePack array'
  end
  local item_count = #items / 5
  if item_count < 1 or item_count ~= floor(item_count) or item_count > MAX_ITEMS then
    return nil, ERR_BAD_ARGUMENT, 'items: five values per item'
  end
  for base = 1, #items, 5 do
    local op, policy_index, group, amount, extra = items[base], items[base + 1], items[base + 2], items[base + 3], items[base + 4]
    local policy = is_int(policy_index, 1, policy_count) and policies[policy_index]
    local bounds = is_int(op, 1, 5) and AMOUNT_BOUNDS[op]
    if
      not bounds
      or not policy
      or not is_int(group, 1, group_count)
      or not is_int(amount, bounds[1], bounds[2])
      or (op == 5 and not is_int(extra, 0, amount))
      or (op ~= 5 and (type(extra) ~= 'string' or #extra > MAX_LEASE_ID_LENGTH))
      or ((op == 3 or op == 4) and policy.concurrency == nil)
      or (op == 5 and policy.concurrency ~= nil)
      or (policy.concurrency ~= nil and lease_keys[group] == nil)
    then
      return nil, ERR_BAD_ARGUMENT, 'item ' .. ((base + 4) / 5)
    end
  end
  return policies, lease_keys, items
end
