package main

// A loopback MCP server over streamable HTTP, as small as the remote-MCP scenario needs
// (capscenario.go): initialize, notifications/initialized and tools/list, each answered with a
// plain application/json body. Every request must carry `Authorization: Bearer <token>`, where
// the token is a variable of the executor's environment only: Codex configured with
// bearer_token_env_var must have the executor resolve it (http/request's valueEnvVar), since
// the harness itself does not have the variable.

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// The one tool the server lists: its name and description must reach the model.
const (
	mcpToolName        = "realcodex_probe_tool"
	mcpToolDescription = "Realcodex probe tool served by the loopback MCP server"
	mcpMaxBody         = 1 << 20
)

// mcpServer serves http://127.0.0.1:PORT/mcp.
type mcpServer struct {
	log   *eventLog
	token string // the bearer token every request must carry
	ln    net.Listener
	srv   *http.Server

	mu       sync.Mutex
	requests []string // "METHOD rpc-method auth=ok|bad(<header>)", in order
	authOK   int
	authBad  int
	listed   bool // tools/list was answered with an accepted bearer
}

func startMCPServer(log *eventLog, token string) (*mcpServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("mcp server listen: %w", err)
	}
	s := &mcpServer{log: log, token: token, ln: ln}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(ln)
	return s, nil
}

// URL is the server's endpoint for config.toml.
func (s *mcpServer) URL() string { return "http://" + s.ln.Addr().String() + "/mcp" }

func (s *mcpServer) Close() { s.srv.Close() }

// mcpStats is what the server saw.
type mcpStats struct {
	Requests []string
	AuthOK   int
	AuthBad  int
	Listed   bool
}

func (s *mcpServer) Stats() mcpStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return mcpStats{Requests: append([]string(nil), s.requests...), AuthOK: s.authOK, AuthBad: s.authBad, Listed: s.listed}
}

func (s *mcpServer) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(req.Body, mcpMaxBody))
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			ProtocolVersion string `json:"protocolVersion"`
		} `json:"params"`
	}
	json.Unmarshal(body, &msg)
	auth := req.Header.Get("Authorization")
	ok := auth == "Bearer "+s.token
	verdict := "auth=ok"
	if !ok {
		verdict = fmt.Sprintf("auth=bad(%q)", auth)
	}
	s.mu.Lock()
	s.requests = append(s.requests, req.Method+" "+msg.Method+" "+verdict)
	if ok {
		s.authOK++
	} else {
		s.authBad++
	}
	s.mu.Unlock()
	s.log.Printf("mcp: %s %s %s %s", req.Method, req.URL.Path, msg.Method, verdict)
	if !ok {
		http.Error(w, "bearer token missing or wrong", http.StatusUnauthorized)
		return
	}
	if req.Method != http.MethodPost {
		// No server-initiated stream (GET) and nothing to end (DELETE).
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	if len(msg.ID) == 0 {
		w.WriteHeader(http.StatusAccepted) // a notification
		return
	}
	var result any
	switch msg.Method {
	case "initialize":
		pv := msg.Params.ProtocolVersion
		if pv == "" {
			pv = "2025-06-18"
		}
		result = map[string]any{
			"protocolVersion": pv,
			"capabilities":    map[string]any{"tools": map[string]any{"listChanged": false}},
			"serverInfo":      map[string]any{"name": "realcodex-mcp", "version": "0.0.1"},
		}
	case "tools/list":
		result = map[string]any{"tools": []any{map[string]any{
			"name":        mcpToolName,
			"description": mcpToolDescription,
			"inputSchema": map[string]any{"type": "object", "properties": map[string]any{}},
		}}}
		s.mu.Lock()
		s.listed = true
		s.mu.Unlock()
	case "ping":
		result = map[string]any{}
	default:
		writeJSON(w, http.StatusOK, map[string]any{"jsonrpc": "2.0", "id": msg.ID,
			"error": map[string]any{"code": -32601, "message": "method not found: " + msg.Method}})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"jsonrpc": "2.0", "id": msg.ID, "result": result})
}
