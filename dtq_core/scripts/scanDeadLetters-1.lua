--[[
  One step of a filtered walk down one partition's DLQ, newest first: read up to COUNT entries
  below a bound and keep those that match, here in Redis, so a search through thousands of dead
  letters does not ship every entry and payload to the client. Read-only. The caller merges the
  partitions' steps (dtq_core/engine/dlq_walk.py).
  Text matching is exactly Python's `needle in text.lower()` for an ASCII needle: besides A-Z,
  the only characters Python lowercases to ASCII are U+0130 (to "i" + U+0307) and U+212A (to
  "k"), mapped here first. A needle with other characters is matched by the caller, which asks
  for the payloads of the entries that pass the other filters instead. A payload is JSON: the
  needle is found there as written, or as a JSON string holds it (ARGV[12..]).
  An error group (the console's "Retry/Discard group") is matched here by its exact error class and
  by its message as a plain substring of the error; the caller then compares the message exactly
  (dlq_walk.group_message: Python's strip and splitlines, which Lua's patterns do not match).
  Input:
    KEYS[1] partition key prefix (dtq_core.keys.Keys.partition): its DLQ and task records
    ARGV[1] upper bound for XREVRANGE ('+', an entry id, or '(' .. entry id)   ARGV[2] COUNT
    ARGV[3] queue ('' = any)   ARGV[4] type ('' = any)   ARGV[5] lower-case ASCII needle ('' = none)
    ARGV[6] return payloads (1/0)   ARGV[7] stop after this many matches
    ARGV[8] stop after this many bytes of text looked at or returned: large payloads must not
            hold Redis for long (lowering 1 MB takes tens of milliseconds)
    ARGV[9] match the error class (1/0)   ARGV[10] the error class, exactly ('': an entry without one)
    ARGV[11] text the error must hold, exactly as written ('' = any)
    ARGV[12..] the needle as the bodies of JSON strings hold it, where that differs (quotes and
            backslashes escaped; one per JSON encoder)
  Output:
    {examined, id of the last entry examined ('' if none), matches, entries read}: matches is a
    list of {entry id, flat fields, payload ('' unless asked for)}
]]
-- #include common
-- #include search
local K = partition_keys(KEYS[1])
local queue, ttype, needle = ARGV[3], ARGV[4], ARGV[5]
local want_payload, task_prefix, wanted = ARGV[6] == '1', K.task_prefix, tonumber(ARGV[7])
local byte_budget, bytes = tonumber(ARGV[8]), 0
local match_class, error_class, error_text = ARGV[9] == '1', ARGV[10], ARGV[11]
local plain_needles, json_needles = {needle}, {needle}
for i = 12, #ARGV do json_needles[#json_needles + 1] = ARGV[i] end

-- Whether the entry is of the error group asked for (any entry when none is).
local function in_group(fields)
  if match_class and (field(fields, 'error_class') or '') ~= error_class then return false end
  if error_text == '' then return true end
  local err = field(fields, 'error') or ''
  bytes = bytes + #err
  return string.find(err, error_text, 1, true) ~= nil
end

local function payload_of(fields)
  return rcall('HGET', task_prefix .. (field(fields, 'task_id') or ''), 'payload') or ''
end

local entries = rcall('XREVRANGE', K.dlq, ARGV[1], '-', 'COUNT', ARGV[2])
local matches, examined, last = {}, 0, ''
for _, entry in ipairs(entries) do
  examined, last = examined + 1, entry[1]
  local fields = entry[2]
  if (queue == '' or field(fields, 'queue') == queue) and (ttype == '' or field(fields, 'type') == ttype)
      and in_group(fields) then
    local ok, payload = true, nil
    if needle ~= '' then
      local text = (field(fields, 'error') or '') .. ' ' .. (field(fields, 'error_class') or '')
      bytes = bytes + #text
      ok = search_has(text, plain_needles)
      if not ok then
        payload = payload_of(fields)
        bytes = bytes + #payload
        ok = search_has(payload, json_needles)
      end
    end
    if ok then
      if want_payload and not payload then
        payload = payload_of(fields)
        bytes = bytes + #payload
      end
      matches[#matches + 1] = {entry[1], fields, want_payload and payload or ''}
      if #matches >= wanted then break end
    end
  end
  if bytes >= byte_budget then break end
end
-- examined < #entries when it stopped early (`wanted`, the byte budget); #entries < COUNT: the
-- walk reached the oldest entry.
return {examined, last, matches, #entries}
