-- check.lua: the test-only prelude (Options.CheckKeys). It shadows redis
-- with a table whose call and pcall first check the command's keys: each
-- must be one of KEYS, and every key's hash tag must be KEYS[1]'s, as
-- Redis Cluster, proxy clusters and Dragonfly require. A script breaking
-- the contract fails here on one Redis as it would on a cluster.
local redis = (function(real)
  local function tag(key)
    local open = string.find(key, '{', 1, true)
    if open then
      local close = string.find(key, '}', open + 1, true)
      if close and close > open + 1 then
        return string.sub(key, open + 1, close - 1)
      end
    end
    return key
  end
  local declared = {}
  for _, k in ipairs(KEYS) do
    declared[k] = true
  end
  if #KEYS > 0 then
    local first = tag(KEYS[1])
    for _, k in ipairs(KEYS) do
      if tag(k) ~= first then
        error('check.lua: KEYS ' .. k .. ' has another hash tag than KEYS[1] ' .. KEYS[1])
      end
    end
  end
  -- Commands with no key, or whose every argument is a key; the others
  -- the engine uses take one key, first.
  local no_key = {time = true, ping = true}
  local all_keys = {del = true, exists = true, unlink = true, mget = true}
  local function check(cmd, ...)
    local name = string.lower(cmd)
    if no_key[name] then
      return
    end
    local args = {...}
    local last = 1
    if all_keys[name] then
      last = #args
    end
    for i = 1, last do
      local key = args[i]
      if key == nil or not declared[key] then
        error('check.lua: ' .. cmd .. ' touches key ' .. tostring(key) .. ', which is not in KEYS')
      end
    end
  end
  return setmetatable({
    call = function(cmd, ...)
      check(cmd, ...)
      return real.call(cmd, ...)
    end,
    pcall = function(cmd, ...)
      check(cmd, ...)
      return real.pcall(cmd, ...)
    end,
  }, {__index = real})
end)(redis)
