package main

// A loopback stand-in for the OpenAI Responses API (streaming SSE), enough to drive one agent
// turn through a fixed script of tool calls: each POST /v1/responses answers with the next
// function call of the script, or, once every call has its output in the request, with a short
// assistant message. The agent runs each call in its environment, which is the exec-server
// under test, and reports the output back here, where the checks read it.

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// toolCall is one step of the mock model's script: the tool to call and its JSON arguments,
// computed from the outputs of the earlier steps (write_stdin needs exec_command's session id).
// apply_patch is a freeform (custom) tool (modelCatalog): its Args are the raw patch, not JSON.
type toolCall struct {
	Name string
	Args func(prev []string) string
}

// freeformTools are the tools the mock calls with custom_tool_call items.
var freeformTools = map[string]bool{"apply_patch": true}

// mockModel serves http://127.0.0.1:PORT/v1.
type mockModel struct {
	log    *eventLog
	script []toolCall
	ln     net.Listener
	srv    *http.Server

	mu        sync.Mutex
	requests  int
	toolsSeen []string
	outputs   []string // tool output of script step i, as the agent reported it
	bodies    []string // every request body, for the checks that look for what reached the model
	turn      int      // script number, part of each call id so turns do not mix
	// reviewer, if set, answers the requests of the harness's automatic approval reviewer
	// (guardian): it gets the request body and returns the final message's text.
	reviewer func(body []byte) string
	reviews  []string // every reviewer request's body, in order
}

func startMockModel(log *eventLog) (*mockModel, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("mock model listen: %w", err)
	}
	m := &mockModel{log: log, ln: ln}
	m.srv = &http.Server{Handler: m, ReadHeaderTimeout: 10 * time.Second}
	go m.srv.Serve(ln)
	return m, nil
}

// SetScript sets the tool calls of the next turn.
func (m *mockModel) SetScript(s []toolCall) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.script = s
	m.outputs = nil
	m.turn++
}

// SetReviewer makes the mock answer the automatic approval reviewer's requests (those that
// ask for the guardian's output schema) with f's text, apart from the script.
func (m *mockModel) SetReviewer(f func(body []byte) string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reviewer = f
}

// Reviews returns the body of every request the reviewer answered.
func (m *mockModel) Reviews() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.reviews...)
}

// CallID is the call id of step k of the current script.
func (m *mockModel) CallID(k int) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return fmt.Sprintf("call-realcodex-%d-%d", m.turn, k)
}

// BaseURL is the provider base_url for config.toml.
func (m *mockModel) BaseURL() string { return "http://" + m.ln.Addr().String() + "/v1" }

func (m *mockModel) Close() { m.srv.Close() }

// saveRequests writes every request body the model received to path, one JSON line each, for
// a scenario's logs.
func (m *mockModel) saveRequests(path string) {
	writeJSONLines(path, func(e *json.Encoder) {
		for _, b := range m.Bodies() {
			e.Encode(json.RawMessage(b))
		}
	})
}

// Result reports the tools offered and the output of each script step so far.
func (m *mockModel) Result() (requests int, tools []string, outputs []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.requests, append([]string(nil), m.toolsSeen...), append([]string(nil), m.outputs...)
}

// Bodies returns every request body so far, in order.
func (m *mockModel) Bodies() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.bodies...)
}

// Offers reports whether the agent offered a function tool with this name.
func (m *mockModel) Offers(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range m.toolsSeen {
		if t == "function:"+name {
			return true
		}
	}
	return false
}

func (m *mockModel) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(req.Body, 64<<20))
	m.log.Printf("model: %s %s %d bytes", req.Method, req.URL.Path, len(body))
	switch {
	case req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/responses"):
		m.responses(w, body)
	case strings.HasSuffix(req.URL.Path, "/models"):
		writeJSON(w, http.StatusOK, map[string]any{"models": []any{}})
	default:
		http.NotFound(w, req)
	}
}

// responsesRequest holds the parts of a Responses API request the mock reads.
type responsesRequest struct {
	Tools []struct {
		Type string `json:"type"`
		Name string `json:"name"`
	} `json:"tools"`
	Input []struct {
		Type   string          `json:"type"`
		CallID string          `json:"call_id"`
		Output json.RawMessage `json:"output"`
	} `json:"input"`
	Text *struct {
		Format struct {
			Name string `json:"name"`
		} `json:"format"`
	} `json:"text"`
}

// reviewerSchema is the name of the output schema the harness's approval reviewer asks for.
const reviewerSchema = "codex_output_schema"

// responses answers one model request. The number of tool outputs already in the input
// says which script step comes next; after the last one the model says "done".
func (m *mockModel) responses(w http.ResponseWriter, body []byte) {
	var r responsesRequest
	if err := json.Unmarshal(body, &r); err != nil {
		m.log.Printf("model: bad request body: %v", err)
	}
	var names []string
	for _, t := range r.Tools {
		names = append(names, t.Type+":"+t.Name)
	}
	m.mu.Lock()
	prefix := fmt.Sprintf("call-realcodex-%d-", m.turn)
	reviewer := m.reviewer
	if reviewer != nil && r.Text != nil && r.Text.Format.Name == reviewerSchema {
		m.reviews = append(m.reviews, string(body))
		m.bodies = append(m.bodies, string(body))
		m.mu.Unlock()
		text := reviewer(body)
		m.log.Printf("model: reviewer request answered %s", text)
		m.stream(w, "review", []map[string]any{{"type": "response.output_item.done", "item": map[string]any{
			"type": "message", "role": "assistant", "id": "msg-review",
			"content": []any{map[string]any{"type": "output_text", "text": text}},
		}}})
		return
	}
	m.mu.Unlock()
	var outputs []string
	for _, in := range r.Input {
		if (in.Type == "function_call_output" || in.Type == "custom_tool_call_output") && strings.HasPrefix(in.CallID, prefix) {
			var text string
			if json.Unmarshal(in.Output, &text) != nil {
				text = string(in.Output)
			}
			outputs = append(outputs, text)
		}
	}
	m.mu.Lock()
	m.requests++
	n := m.requests
	m.bodies = append(m.bodies, string(body))
	m.toolsSeen = names
	m.outputs = outputs
	script := m.script
	m.mu.Unlock()
	m.log.Printf("model: request %d tools=%v", n, names)
	for i, o := range outputs {
		m.log.Printf("model: step %d output %q", i, clip(o, 600))
	}

	var events []map[string]any
	if k := len(outputs); k < len(script) {
		args := script[k].Args(outputs)
		m.log.Printf("model: step %d calls %s %q", k, script[k].Name, args)
		item := map[string]any{
			"type": "function_call", "id": fmt.Sprintf("fc-%d", k), "call_id": fmt.Sprintf("%s%d", prefix, k),
			"name": script[k].Name, "arguments": args,
		}
		if freeformTools[script[k].Name] {
			item = map[string]any{
				"type": "custom_tool_call", "id": fmt.Sprintf("ctc-%d", k), "call_id": fmt.Sprintf("%s%d", prefix, k),
				"name": script[k].Name, "input": args, "status": "completed",
			}
		}
		events = append(events, map[string]any{"type": "response.output_item.done", "item": item})
	} else {
		events = append(events, map[string]any{"type": "response.output_item.done", "item": map[string]any{
			"type": "message", "role": "assistant", "id": "msg-1",
			"content": []any{map[string]any{"type": "output_text", "text": "done"}},
		}})
	}
	m.stream(w, fmt.Sprint(n), events)
}

// stream writes one response: response.created, items, response.completed.
func (m *mockModel) stream(w http.ResponseWriter, id string, items []map[string]any) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	respID := "resp-" + id
	events := []map[string]any{{"type": "response.created", "response": map[string]any{"id": respID}}}
	events = append(events, items...)
	events = append(events, map[string]any{"type": "response.completed", "response": map[string]any{
		"id": respID,
		"usage": map[string]any{
			"input_tokens": 1, "input_tokens_details": nil, "output_tokens": 1,
			"output_tokens_details": nil, "total_tokens": 2,
		},
	}})
	for _, ev := range events {
		b, _ := json.Marshal(ev)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev["type"], b)
	}
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// modelCatalog is the model_catalog_json that describes the mock model to the harness. An
// unknown model gets fallback metadata without apply_patch; this entry asks for the freeform
// apply_patch tool (0.169 accepts no other apply_patch_tool_type) and otherwise keeps the
// fallback's tool set.
func modelCatalog() []byte {
	b, _ := json.MarshalIndent(map[string]any{"models": []any{map[string]any{
		"slug":                         "realcodex-mock",
		"display_name":                 "realcodex loopback mock",
		"base_instructions":            "You are a scripted test model.",
		"apply_patch_tool_type":        "freeform",
		"shell_type":                   "shell_command",
		"visibility":                   "hide",
		"supported_in_api":             true,
		"priority":                     99,
		"input_modalities":             []string{"text", "image"},
		"supported_reasoning_levels":   []any{},
		"support_verbosity":            false,
		"truncation_policy":            map[string]any{"mode": "bytes", "limit": 10000},
		"experimental_supported_tools": []any{},
	}}}, "", "  ")
	return b
}

// jsonArgs encodes tool arguments.
func jsonArgs(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
