-- The rate algorithms by code, and normalizeState() from packages/core/src/algorithms/index.ts:
-- a state written by another algorithm, or with other parameters, is converted through its
-- usage so that a rule update carries usage over instead of resetting the key.
local RATE = {
  [token_bucket.code] = token_bucket,
  [gcra.code] = gcra,
  [sliding_window.code] = sliding_window,
  [fixed_window.code] = fixed_window,
  [sliding_log.code] = sliding_log,
}

local function normalize_state(state, now, limit)
  if state == nil then
    return nil
  end
  local target = RATE[limit.code]
  if target == nil then
    return nil
  end
  if state[1] == limit.code and target.compatible(state, limit) then
    return state
  end
  local source = RATE[state[1]]
  if source == nil then
    return nil
  end
  return target.from_usage(source.usage(state, now, limit), now, limit)
end
