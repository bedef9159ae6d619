-- Concurrency permits, mirroring packages/core/src/algorithms/concurrency.ts.
-- The TypeScript keeps the held permits as an array; here they live in two keys of the entry so that
-- each operation costs O(log n) instead of rewriting every permit:
--   entry.lkey  ZSET  permit id -> expires_at (ms, Redis clock)
--   entry.ckey  HASH  permit id -> cost (permits)
-- and the entry's state for the limit is {6, total}: the summed cost of every permit in the ZSET,
-- expired or not. Costs are integers, so totals are exact whatever the order of the sums.
-- A permit is live while expires_at > now, like livePermits(). The caller declares lkey and ckey
-- (see batch.lua) for every key whose policy has a concurrency limit, the only time they are
-- touched here.
local concurrency = { code = 6 }

-- Keys are bounded by Lua's unpack stack (LUAI_MAXCSTACK); page through long id lists.
local CC_PAGE = 1000

local function cc_sum_costs(ckey, ids)
  local sum = 0
  for from = 1, #ids, CC_PAGE do
    local costs = rcall('HMGET', ckey, unpack(ids, from, min(#ids, from + CC_PAGE - 1)))
    for i = 1, #costs do
      sum = sum + (tonumber(costs[i]) or 0)
    end
  end
  return sum
end

local function cc_hdel(ckey, ids)
  for from = 1, #ids, CC_PAGE do
    rcall('HDEL', ckey, unpack(ids, from, min(#ids, from + CC_PAGE - 1)))
  end
end

-- Permits that are no longer live (their expiry is <= now), and their summed cost.
local function cc_expired(entry, now)
  local ids = rcall('ZRANGEBYSCORE', entry.lkey, '-inf', now)
  if #ids == 0 then
    return ids, 0
  end
  return ids, cc_sum_costs(entry.ckey, ids)
end

-- Drops expired permits; returns their summed cost.
local function cc_prune(entry, now)
  local ids, cost = cc_expired(entry, now)
  if #ids > 0 then
    rcall('ZREMRANGEBYSCORE', entry.lkey, '-inf', now)
    cc_hdel(entry.ckey, ids)
  end
  return cost
end

-- The latest expiry among live permits other than permit_id (nil: any), or now (the `max` of resetAfter).
local function cc_latest(entry, permit_id, now)
  local top = rcall('ZREVRANGE', entry.lkey, 0, 1, 'WITHSCORES')
  for i = 1, #top, 2 do
    if top[i] ~= permit_id then
      return max(now, tonumber(top[i + 1]))
    end
  end
  return now
end

-- Time until enough live permits (other than permit_id) expire to bring `excess` to zero, walking
-- them by expiry like the sort in acquire().
local function cc_retry_after(entry, permit_id, now, excess)
  local offset = 0
  while true do
    local page = rcall('ZRANGEBYSCORE', entry.lkey, '(' .. fmt(now), '+inf', 'WITHSCORES', 'LIMIT', offset, CC_PAGE)
    if #page == 0 then
      return 0
    end
    local ids, scores = {}, {}
    for i = 1, #page, 2 do
      if page[i] ~= permit_id then
        ids[#ids + 1] = page[i]
        scores[#scores + 1] = tonumber(page[i + 1])
      end
    end
    if #ids > 0 then
      local costs = rcall('HMGET', entry.ckey, unpack(ids))
      for i = 1, #ids do
        excess = excess - (tonumber(costs[i]) or 0)
        if excess <= EPS_PERMITS then
          return ceil_ms(scores[i] - now)
        end
      end
    end
    offset = offset + CC_PAGE
  end
end

-- Decides taking `cost` permits under permit_id (acquire() with ttlMs = limit.permitTtlMs).
-- Nothing is written here: when allowed, the returned plan is applied by commit() once every
-- limit of the key has allowed. Returns allowed, remaining, retry_after_ms, reset_after_ms,
-- plan, ttl_ms.
function concurrency.acquire(entry, state, permit_id, cost, now, limit)
  local used, expired, own = 0, nil, nil
  if state ~= nil then
    local expired_cost
    expired, expired_cost = cc_expired(entry, now)
    used = state[2] - expired_cost
    own = rcall('ZSCORE', entry.lkey, permit_id)
    if own and tonumber(own) > now then
      used = used - (tonumber(rcall('HGET', entry.ckey, permit_id)) or 0)
    end
  end
  if used + cost <= limit.limit + EPS_PERMITS then
    local expires_at = now + limit.permit_ttl_ms
    local latest = state ~= nil and cc_latest(entry, permit_id, now) or now
    if cost > 0 then
      latest = max(latest, expires_at)
    end
    local reset_after = ceil_ms(latest - now)
    local plan = { state = state, expired = expired, own = own, used = used, cost = cost, expires_at = expires_at }
    return true, whole_permits(limit.limit - used - cost), 0, reset_after, plan, reset_after
  end
  local retry_after, reset_after = 0, 0
  if state ~= nil then
    retry_after = cc_retry_after(entry, permit_id, now, used + cost - limit.limit)
    reset_after = ceil_ms(cc_latest(entry, permit_id, now) - now)
  end
  return false, whole_permits(limit.limit - used), retry_after, reset_after
end

-- Applies an allowed acquire: drops expired permits and permit_id's previous permit, adds the new
-- one when cost > 0. Returns the limit's next state.
function concurrency.commit(entry, plan, permit_id, now)
  if plan.state == nil then
    -- A fresh limit: make sure no permit outlived the state that counted it.
    rcall('DEL', entry.lkey, entry.ckey)
  else
    if #plan.expired > 0 then
      rcall('ZREMRANGEBYSCORE', entry.lkey, '-inf', now)
      cc_hdel(entry.ckey, plan.expired)
    end
    if plan.own then
      rcall('ZREM', entry.lkey, permit_id)
      rcall('HDEL', entry.ckey, permit_id)
    end
  end
  local total = plan.used
  if plan.cost > 0 then
    rcall('ZADD', entry.lkey, plan.expires_at, permit_id)
    rcall('HSET', entry.ckey, permit_id, plan.cost)
    total = total + plan.cost
  end
  return { 6, total }
end

-- Extends a live permit to max(its expiry, now + ttl_ms) (renew()). Returns found, the next state
-- and ttl_ms.
function concurrency.renew(entry, state, permit_id, now, ttl_ms)
  if state == nil then
    rcall('DEL', entry.lkey, entry.ckey)
    return false, { 6, 0 }, 0
  end
  local total = state[2] - cc_prune(entry, now)
  local score = rcall('ZSCORE', entry.lkey, permit_id)
  if score then
    rcall('ZADD', entry.lkey, max(tonumber(score), now + ttl_ms), permit_id)
  end
  return score ~= false, { 6, total }, ceil_ms(cc_latest(entry, nil, now) - now)
end

-- Frees a live permit (release()). Returns found, the next state and ttl_ms.
function concurrency.release(entry, state, permit_id, now)
  if state == nil then
    rcall('DEL', entry.lkey, entry.ckey)
    return false, { 6, 0 }, 0
  end
  local total = state[2] - cc_prune(entry, now)
  local found = rcall('ZREM', entry.lkey, permit_id) == 1
  if found then
    total = total - (tonumber(rcall('HGET', entry.ckey, permit_id)) or 0)
    rcall('HDEL', entry.ckey, permit_id)
  end
  return found, { 6, total }, ceil_ms(cc_latest(entry, nil, now) - now)
end

-- The TypeScript's adjustKey() keeps the permits and stretches the key's lifetime to the latest
-- stored permit: max over permits of ceil(expiresAt - now), expired ones included.
function concurrency.adjust_ttl(entry, state, now, ttl)
  if state == nil then
    return ttl
  end
  local top = rcall('ZREVRANGE', entry.lkey, 0, 0, 'WITHSCORES')
  if #top == 0 then
    return ttl
  end
  return max(ttl, ceil(tonumber(top[2]) - now))
end
