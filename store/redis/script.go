package redis

// batchScript applies one slot group of a batch atomically. Go computes
// every Result field from what the script returns (the state it read) with
// store.Evaluate, the function the other stores decide with; the script is
// its twin inside Redis and only has to make the same allow/deny decisions
// and write the same new state, exactly (the property test checks it).
//
// Lua numbers are doubles, exact only up to 2^53, and Unix nanoseconds are
// about 1.8e18. So every nanosecond quantity is carried as a pair (h, l)
// with value h*1e9 + l and 0 <= l < 1e9: h is a number of seconds (|h| <
// 9.3e9) and l of nanoseconds, both exact. Addition, subtraction and
// comparison on pairs are exact for every int64 value, and decimal strings
// convert to and from pairs without ever forming the full number.
//
// KEYS[i] is op i's key. With ARGV[3] == "1", fixed-window keys arrive
// without their window start, which the script appends from its own now
// (server clock); otherwise every key is complete.
//
// ARGV[1]  now in Unix nanoseconds (decimal), or "" to read Redis TIME
// ARGV[2]  "1": all-or-nothing (a denied spend/check blocks every GCRA
//
//	write and every reset of the group), else "0"
//
// ARGV[3]  "1": append the window start to fixed-window keys, else "0"
// then three arguments per op, code, a, b:
//
//	code: algorithm "g" (GCRA) or "w" (window), then the action: "s"
//	spend, "c" check, "o" spend-only, "f" refund, "r" reset; the action
//	letter in upper case means "evaluate only, never write" (used for the
//	refunds and resets of a multi-slot all-or-nothing batch, which run in a
//	second round).
//	GCRA: a = cost*E and b = burst offset B, in nanoseconds (decimal).
//	Window: a = cost in hits, b = window length in seconds, or
//	"length,ttl" to give a new window's key a TTL other than its length
//	(Options.ExpirationJitter).
//
// It returns {now, state1, applied1, state2, applied2, ...}: now as Unix
// nanoseconds (decimal), state the bucket's state before the op as stored
// (a GCRA TAT, "" when missing or not after now; a window count, "" when
// missing), applied 1 when the op changed its bucket (or, for a window
// refund of a non-zero cost, would have: store.Evaluate's convention).
//
// A GCRA write is SET key TAT PX ms with ms = ceil((TAT-now)/1ms) + 1000:
// the key vanishes one second after the bucket is full again, measured from
// now. A relative expiry works whatever the caller's clock says (a fake
// clock in tests, or one skewed from Redis's), and the extra second keeps a
// live bucket from vanishing early when the caller's clock runs up to a
// second behind Redis's. A bucket kept past its TAT is full, as if missing.
// A TAT moved back to now (a refund to full) is a DEL.
const batchScript = `
local G = 1000000000
local SLACK = 1000 -- ms of expiry beyond the TAT
local function parse(s)
  local neg = false
  if string.sub(s, 1, 1) == '-' then neg = true; s = string.sub(s, 2) end
  local n = #s
  local h, l = 0, 0
  if n > 9 then
    h = tonumber(string.sub(s, 1, n - 9)); l = tonumber(string.sub(s, n - 8))
  else
    l = tonumber(s)
  end
  if neg then
    if l == 0 then return -h, 0 end
    return -h - 1, G - l
  end
  return h, l
end
local function add(ah, al, bh, bl)
  local h, l = ah + bh, al + bl
  if l >= G then return h + 1, l - G end
  return h, l
end
local function sub(ah, al, bh, bl)
  local h, l = ah - bh, al - bl
  if l < 0 then return h - 1, l + G end
  return h, l
end
local function less(ah, al, bh, bl)
  return ah < bh or (ah == bh and al < bl)
end
-- A window's b: its length, and the TTL of its key (the last number).
local function winlen(b) return tonumber(string.match(b, '^%d+')) end
local function winttl(b) return tonumber(string.match(b, '%d+$')) end
local function fmt(h, l)
  local sign = ''
  if h < 0 then
    sign = '-'
    if l == 0 then h = -h else h, l = -h - 1, G - l end
  end
  if h == 0 then return sign .. string.format('%d', l) end
  return sign .. string.format('%d%09d', h, l)
end

local nh, nl
if ARGV[1] == '' then
  local t = redis.call('TIME')
  nh, nl = tonumber(t[1]), tonumber(t[2]) * 1000
else
  nh, nl = parse(ARGV[1])
end
local aon = ARGV[2] == '1'
local winkey = ARGV[3] == '1'

local n = #KEYS
local keys, rh, rl, cnt, ok = {}, {}, {}, {}, {}
local out = {fmt(nh, nl)}
local denied = false
for i = 1, n do
  local code, a, b = ARGV[3 * i + 1], ARGV[3 * i + 2], ARGV[3 * i + 3]
  local alg, act = string.sub(code, 1, 1), string.lower(string.sub(code, 2, 2))
  local key = KEYS[i]
  if alg == 'w' and winkey then
    local len = winlen(b)
    key = key .. string.format('%d', nh - nh % len)
  end
  keys[i] = key
  -- A window hit needs no read: INCRBY in the second pass tells the count.
  local lazy = alg == 'w' and (act == 's' or act == 'o') and a ~= '0'
    and string.sub(code, 2, 2) == act
  local v = false
  if not lazy then v = redis.call('GET', key) end
  if lazy then
    cnt[i] = false
  elseif alg == 'g' then
    local h, l = 0, 0
    if v then
      local th, tl = parse(v)
      h, l = sub(th, tl, nh, nl)
      -- A TAT at or before now is a full bucket, the same as none.
      if not less(0, 0, h, l) then v = false; h, l = 0, 0 end
    end
    if act == 's' or act == 'c' or act == 'o' then
      local ih, il = parse(a)
      local bh, bl = parse(b)
      local sh, sl = add(h, l, ih, il)
      -- Allowed iff max(tat, now) + cost*E <= now + B.
      ok[i] = not less(bh, bl, sh, sl)
      if not ok[i] and act ~= 'o' then denied = true end
      h, l = sh, sl
    end
    rh[i], rl[i] = h, l
  else
    cnt[i] = tonumber(v) or 0
  end
  out[2 * i] = v or ''
  out[2 * i + 1] = 0
end

local blocked = aon and denied
for i = 1, n do
  local code, a, b = ARGV[3 * i + 1], ARGV[3 * i + 2], ARGV[3 * i + 3]
  local alg, act = string.sub(code, 1, 1), string.sub(code, 2, 2)
  local dry = act ~= string.lower(act)
  act = string.lower(act)
  local key = keys[i]
  local existed = out[2 * i] ~= ''
  local applied = 0
  if act == 'r' then
    if existed and not blocked then applied = 1 end
    if not dry and not blocked then redis.call('DEL', key) end
  elseif alg == 'w' then
    local cost = tonumber(a)
    if act == 'f' then
      if cost ~= 0 then
        applied = 1
        local after = cnt[i] - cost
        if after < 0 then after = 0 end
        if not dry and existed and after ~= cnt[i] then
          redis.call('INCRBY', key, after - cnt[i])
        end
      end
    elseif cnt[i] == false then
      -- A lazy hit (see the first pass): the key's first hit in its
      -- window sets the expiry, later hits keep it.
      applied = 1
      local after = redis.pcall('INCRBY', key, cost)
      if type(after) == 'table' then
        -- Past the largest integer Redis holds: saturated, not counted.
        applied = 0
        out[2 * i] = '9223372036854775807'
      elseif after == cost then
        redis.call('EXPIRE', key, winttl(b))
        out[2 * i] = ''
      else
        out[2 * i] = string.format('%d', after - cost)
      end
    elseif act ~= 'c' and cost ~= 0 then
      applied = 1
      if not dry then
        redis.call('INCRBY', key, cost)
        redis.call('EXPIRE', key, winttl(b))
      end
    end
  elseif not blocked then
    local h, l = rh[i], rl[i]
    if act == 'f' then
      if existed then
        local ih, il = parse(a)
        local fh, fl = sub(h, l, ih, il)
        -- newTAT = max(tat - cost*E, now).
        if less(fh, fl, 0, 0) then fh, fl = 0, 0 end
        if fh ~= h or fl ~= l then
          applied = 1
          if not dry then
            if fh == 0 and fl == 0 then
              redis.call('DEL', key)
            else
              local th, tl = add(fh, fl, nh, nl)
              redis.call('SET', key, fmt(th, tl), 'PX', fh * 1000 + math.ceil(fl / 1000000) + SLACK)
            end
          end
        end
      end
    elseif (act == 's' or act == 'o') and ok[i] and a ~= '0' then
      applied = 1
      if not dry then
        local th, tl = add(h, l, nh, nl)
        redis.call('SET', key, fmt(th, tl), 'PX', h * 1000 + math.ceil(l / 1000000) + SLACK)
      end
    end
  end
  if dry then applied = 0 end
  out[2 * i + 1] = applied
end
return out
`
