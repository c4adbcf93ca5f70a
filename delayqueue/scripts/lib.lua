-- lib.lua: helpers prepended to every script (see scripts.go). Kept free of
-- side effects: it only defines local functions.

-- now_us reads the one clock every instance shares: Redis TIME.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- int renders a number as a decimal integer string (Redis' Lua and
-- miniredis' Lua print large numbers differently; this prints both alike).
local function int(n)
  return string.format('%d', n)
end

-- body_chunk is the largest chunk of a body stored in one hash field. Values
-- up to hash-max-listpack-value (64 by default) keep the hash compact.
local body_chunk = 64
-- body_max_chunks bounds chunking: beyond it the hash is not compact anyway,
-- so the body is stored whole in field "b".
local body_max_chunks = 100

-- write_body stores body into the job hash: chunks b1..bn with n = count, or
-- the whole body in b with n = -1.
local function write_body(job, body)
  local len = string.len(body)
  local n = math.ceil(len / body_chunk)
  if n > body_max_chunks then
    redis.call('HSET', job, 'n', '-1', 'b', body)
    return
  end
  local args = {'n', int(n)}
  for i = 1, n do
    args[#args + 1] = 'b' .. i
    args[#args + 1] = string.sub(body, (i - 1) * body_chunk + 1, i * body_chunk)
  end
  redis.call('HSET', job, unpack(args))
end

-- read_body reassembles what write_body stored.
local function read_body(job, n)
  n = tonumber(n) or 0
  if n < 0 then
    return redis.call('HGET', job, 'b') or ''
  end
  if n == 0 then
    return ''
  end
  local fields = {}
  for i = 1, n do
    fields[i] = 'b' .. i
  end
  local parts = redis.call('HMGET', job, unpack(fields))
  for i = 1, n do
    if not parts[i] then
      parts[i] = ''
    end
  end
  return table.concat(parts)
end

-- signal leaves a wake-up token for a topic's waiters: count tokens, without
-- letting the token list grow past cap.
local function signal(wake, count, cap)
  local room = cap - redis.call('LLEN', wake)
  if count > room then
    count = room
  end
  while count > 0 do
    local n = count
    if n > 200 then
      n = 200
    end
    local tokens = {}
    for i = 1, n do
      tokens[i] = '1'
    end
    redis.call('RPUSH', wake, unpack(tokens))
    count = count - n
  end
end
