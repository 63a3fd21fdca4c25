-- wrk script: every connection alternates HEAD and GET, so every GET follows a HEAD on
-- its connection (docs/security.md: the cost of a new upstream connection after a HEAD
-- whose answer announced a length). The HEAD's path is the script's argument (default
-- the URL's path): one that answers with a length, and one that answers
-- `Content-Length: 0` as the reference (the connection is reused).
--
--   wrk -t1 -c8 -d10s -s scripts/head-then-get.lua http://127.0.0.1:PORT/ -- /empty
local head
local get = wrk.format("GET", wrk.path)
local n = 0

function init(args)
  head = wrk.format("HEAD", args[1] or wrk.path)
end

function request()
  n = n + 1
  if n % 2 == 1 then
    return head
  end
  return get
end
