-- fair(): the functions of limits per key (fair.lua, and ready.lua's they use), made at its first call,
-- so a script whose plain job needs none of them does not pay for making them: every function a script
-- makes, it makes again on every call.
local made
local function fair()
  if not made then
${READY}
${FAIR}
    made = {live = live, park = park, next_turn = next_turn, keep_turn = keep_turn, key_of = key_of,
            before = before, ready = ready, priority_in = priority_in}
  end
  return made
end
