module execserver/interop

go 1.26

require (
	github.com/aws/aws-sdk-go-v2 v1.48.0
	github.com/coder/websocket v1.8.15
	github.com/creack/pty v1.1.24
	github.com/flynn/noise v1.1.0
	github.com/gobwas/ws v1.5.0
	github.com/gorilla/websocket v1.5.3
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/aws/smithy-go v1.28.9 // indirect
	github.com/gobwas/httphead v0.1.0 // indirect
	golang.org/x/crypto v0.0.0-20210322153248-0c34fe9e7dc2 // indirect
	golang.org/x/sys v0.0.0-20201119102817-f84b799fce68 // indirect
)
