-- check.lua: the test-only prelude (Options.CheckKeys). It shadows redis
-- with a table whose call and pcall first check the command's keys: each
-- must be one of KEYS, and every key's hash tag must be KEYS[1]'s, as
-- Redis Cluster, proxy clusters and Dragonfly require. A script breaking
-- the contract fails here on one Redis as it would on a cluster.
-- check_keys starts a call, before begin_record. Like lib.lua, the top
-- level only declares: in a library it runs at load, where the redis it
-- sees is not the one calls use, so the real one is looked up per call.
local function real_redis()
  return redis
end
local redis = {}
local declared

local function key_tag(key)
  local open = string.find(key, '{', 1, true)
  if open then
    local close = string.find(key, '}', open + 1, true)
    if close and close > open + 1 then
      return string.sub(key, open + 1, close - 1)
    end
  end
  return key
end

-- Commands with no key, or whose every argument is a key; the others the
-- engine uses take one key, first.
local function check_command(cmd, ...)
  local name = string.lower(cmd)
  if name == 'time' or name == 'ping' then
    return
  end
  local args = {...}
  local last = 1
  if name == 'del' or name == 'exists' or name == 'unlink' or name == 'mget' then
    last = #args
  end
  for i = 1, last do
    local key = args[i]
    if key == nil or not declared[key] then
      error('check.lua: ' .. cmd .. ' touches key ' .. tostring(key) .. ', which is not in KEYS')
    end
  end
end

local function check_keys()
  declared = {}
  for _, k in ipairs(KEYS) do
    declared[k] = true
  end
  if #KEYS > 0 then
    local first = key_tag(KEYS[1])
    for _, k in ipairs(KEYS) do
      if key_tag(k) ~= first then
        error('check.lua: KEYS ' .. k .. ' has another hash tag than KEYS[1] ' .. KEYS[1])
      end
    end
  end
  if not redis.call then
    redis.call = function(cmd, ...)
      check_command(cmd, ...)
      return real_redis().call(cmd, ...)
    end
    redis.pcall = function(cmd, ...)
      check_command(cmd, ...)
      return real_redis().pcall(cmd, ...)
    end
    setmetatable(redis, {__index = function(_, k)
      return real_redis()[k]
    end})
  end
end
