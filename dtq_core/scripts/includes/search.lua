-- Text search in scan scripts (scanRecentTasks, scanDeadLetters): a needle found ignoring case, as
-- Python's `needle in text.lower()` finds it for an ASCII needle (the callers match other needles
-- in Python: only Python lower-cases Unicode). Needs: nothing.

-- Lower-case as Python does for what an ASCII needle can match: U+0130 and U+212A are the only
-- other characters Python lower-cases to ASCII (to "i" + a combining dot, and "k").
local function search_lower(text)
  if string.find(text, '[\196\226]') then
    text = string.gsub(string.gsub(text, '\196\176', 'i\204\135'), '\226\132\170', 'k')
  end
  return string.lower(text)
end

-- Whether one of the needles is in the text (nil: no text), any case; plain finds, so '%' or '.'
-- in a needle is itself.
local function search_has(text, needles)
  if not text then return false end
  text = search_lower(text)
  for _, needle in ipairs(needles) do
    if string.find(text, needle, 1, true) then return true end
  end
  return false
end
