module github.com/delay-queue/delay-queue

go 1.26.8

require (
	github.com/alicebob/miniredis/v2 v2.40.0 // indirect
	github.com/gomodule/redigo v1.9.3 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	gopkg.in/ini.v1 v1.68.0 // indirect
)
