-- Timestamped charges, mirroring packages/core/src/algorithms/timed-log.ts: the state shared by
-- the sliding log and the sliding window. A state table is {header..., ts1, cost1, ts2, cost2,
-- ...} with `head` header values (the algorithm's code first) and entries in time order; an
-- entry counts while ts + window_ms > now. The TypeScript's entries[i] is log[head + i + 1] here.

-- A fresh table with state's header and the entries still inside the window.
local function tl_live(state, head, now, window_ms)
  local log = {}
  for i = 1, head do
    log[i] = state[i]
  end
  local len = #state
  local i = head + 1
  while i <= len and state[i] + window_ms <= now do
    i = i + 2
  end
  local j = head
  for p = i, len do
    j = j + 1
    log[j] = state[p]
  end
  return log
end

-- Permits held by the entries.
local function tl_sum(log, head)
  local s = 0
  for i = head + 2, #log, 2 do
    s = s + log[i]
  end
  return s
end

-- The index of the count of the last entry stamped at or before t (head when there is none).
local function tl_end_up_to(log, head, t)
  local i = #log
  while i > head and log[i - 1] > t do
    i = i - 2
  end
  return i
end

-- Adds a charge stamped at, in place and in time order (a lease's charge is stamped ahead of the
-- others); a charge at the same instant as an entry joins it.
local function tl_append(log, head, at, cost)
  local i = tl_end_up_to(log, head, at)
  if i > head and log[i - 1] == at then
    log[i] = log[i] + cost
    return
  end
  tinsert(log, i + 1, cost)
  tinsert(log, i + 1, at)
end

-- Takes in place up to amount permits from the entry at i (removed when emptied); returns how
-- many it took.
local function tl_take(log, i, amount)
  local c = log[i + 1]
  if c > amount then
    log[i + 1] = c - amount
    return amount
  end
  tremove(log, i)
  tremove(log, i)
  return c
end

-- Removes amount permits in place, newest charges first; charges stamped after now are leases'
-- and are never refunded here (their permits may still be in use).
local function tl_refund(log, head, amount, now)
  local i = tl_end_up_to(log, head, now)
  local left = amount
  while left > 0 and i > head do
    left = left - tl_take(log, i - 1, left)
    i = i - 2
  end
end

-- Removes in place up to amount permits of the charge stamped at: from the oldest entry stamped
-- at or after it (entries only merge forward into the next one), and from no other.
local function tl_refund_at(log, head, amount, at)
  local i = head + 1
  while i <= #log and log[i] < at do
    i = i + 2
  end
  if i <= #log then
    tl_take(log, i, amount)
  end
end

-- A refund: of the charge stamped at when given (> 0), else of the newest charges made by now.
local function tl_refund_for(log, head, amount, now, at)
  if at > 0 then
    tl_refund_at(log, head, amount, at)
  else
    tl_refund(log, head, amount, now)
  end
end

-- Time until excess permits have left the window (0 when nothing needs to leave).
local function tl_retry_after(log, head, excess, now, window_ms)
  local left = excess
  for i = head + 1, #log, 2 do
    left = left - log[i + 1]
    if left <= EPS_PERMITS then
      return ceil_ms(log[i] + window_ms - now)
    end
  end
  return 0
end

-- Time until every entry has left the window.
local function tl_reset_after(log, head, now, window_ms)
  local len = #log
  if len == head then
    return 0
  end
  return ceil_ms(log[len - 1] + window_ms - now)
end

-- The earliest time at or after from at which cost more permits fit limit in the window of every
-- entry still counted then, future-stamped ones included (startOfEntries). state has its header.
local function tl_start_of(state, head, cost, from, limit, window_ms)
  local log = tl_live(state, head, from, window_ms)
  local count = tl_sum(log, head)
  if count + cost <= limit + EPS_PERMITS then
    return from
  end
  -- The exact moment enough of the oldest entries have left (an entry leaves at ts + window),
  -- not rounded: a later booking never starts before an earlier one.
  local left = count + cost - limit
  for i = head + 1, #log, 2 do
    left = left - log[i + 1]
    if left <= EPS_PERMITS then
      return max(from, log[i] + window_ms)
    end
  end
  return 1 / 0
end
