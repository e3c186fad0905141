//go:build tools

// Package interop holds cross-checks of the hand-written wire code in the root module against
// independent implementations. It is a separate module so that none of these dependencies reach
// the exec-server binary.
package interop

import (
	_ "github.com/coder/websocket"
	_ "github.com/flynn/noise"
	_ "github.com/gobwas/ws"
	_ "github.com/gorilla/websocket"
	_ "google.golang.org/protobuf/encoding/protowire"
)
