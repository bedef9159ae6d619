-- Result codes shared with src/codes.ts (a unit test checks that both lists agree).
-- Whole-call codes are the first element of the reply; item codes replace an item's result.
local OK = 0
-- The caller speaks another protocol version than this script (a rolling deploy).
local ERR_PROTOCOL_VERSION = 1
-- An argument is missing, malformed or out of bounds; the reply's second element says which.
local ERR_BAD_ARGUMENT = 2
-- Item code: the key holds something this script did not write (foreign or corrupt data).
local ERR_CORRUPT_STATE = -3
-- Item code: a booking (op 7 or 8) of a policy with a concurrency limit, which cannot be booked.
local ERR_NOT_BOOKABLE = -4
-- Item code: a booking call (op 7 or 8) named a booking held under another token; nothing of
-- that booking was read or changed.
local ERR_BOOKING_TOKEN = -5
