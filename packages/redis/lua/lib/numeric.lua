-- Numeric helpers mirroring packages/core/src/algorithms/types.ts. Lua numbers are the same
-- IEEE doubles as JavaScript numbers, so the same operations in the same order give the same
-- bits; keep every expression in the algorithms in the order the TypeScript writes it.

-- Tolerance for floating-point comparisons of permits (EPS_PERMITS).
local EPS_PERMITS = 1e-6
-- Tolerance for floating-point comparisons of times in ms (EPS_MS).
local EPS_MS = 1e-3

-- Whole permits in x, tolerating float noise just below an integer (wholePermits).
local function whole_permits(x)
  return max(0, floor(x + EPS_PERMITS))
end

-- Usage after an adjustment of delta permits (adjustedUsage): a refund stops at 0, a charge at
-- ceiling, and a charge never lowers usage already beyond it.
local function adjusted_usage(used, delta, ceiling)
  if delta <= 0 then
    return max(0, used + delta)
  end
  return max(used, min(used + delta, ceiling))
end

-- Milliseconds rounded up, never negative (ceilMs).
local function ceil_ms(x)
  return max(0, ceil(x - EPS_MS))
end

-- Lua's tostring keeps 14 digits and a reply truncates to an integer; 17 significant digits
-- round-trip every double exactly. (Numbers passed to redis.call need no care: Redis itself
-- formats them with 17 digits.)
local function fmt(x)
  return format('%.17g', x)
end

-- A whole number for a reply. Redis turns a Lua number into an integer reply, exact below
-- 2^53 (every figure a decision reports in practice); larger ones go as exact strings.
local function reply_number(x)
  if x < 9007199254740992 then
    return x
  end
  return fmt(x)
end
