package main

// Splitting a server message into its envelope without decoding the payload: the reply flood
// moves a gigabyte of process/read answers through one client, and all it needs of each is
// the id.
//
// exec-server writes its messages compactly, in one order (rpc.go's wire format):
//
//	{"id":ID,"result":R}
//	{"error":{"code":C,"message":T},"id":ID}
//	{"method":M,"params":P}
//
// The first and the last are split by position; anything else goes through encoding/json.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// rpcError is a JSON-RPC error object.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *rpcError) Error() string { return fmt.Sprintf("%d %s", e.Code, e.Message) }

// codeSessionAttached is the server's answer to a resume of a session that another connection
// (here: the one just dropped, not yet noticed by the server) still holds.
const codeSessionAttached = -32010

// envelope is one server message, split.
type envelope struct {
	reply  bool // a response: id, and result or err
	id     int64
	result []byte
	err    *rpcError
	method string // a notification: method and params
	params []byte
}

// The fixed parts of the two layouts split by position.
const (
	replyPrefix = `{"id":`
	resultKey   = `,"result":`
	notePrefix  = `{"method":"`
	paramsKey   = `,"params":`
)

var errNotObject = errors.New("not a JSON object")

// parseEnvelope splits msg. result and params alias msg.
func parseEnvelope(msg []byte) (envelope, error) {
	if len(msg) < 2 || msg[len(msg)-1] != '}' {
		return envelope{}, errNotObject
	}
	if rest, ok := bytes.CutPrefix(msg, []byte(replyPrefix)); ok {
		if i := bytes.IndexByte(rest, ','); i > 0 && bytes.HasPrefix(rest[i:], []byte(resultKey)) {
			if id, err := strconv.ParseInt(string(rest[:i]), 10, 64); err == nil {
				return envelope{reply: true, id: id, result: rest[i+len(resultKey) : len(rest)-1]}, nil
			}
		}
	}
	if rest, ok := bytes.CutPrefix(msg, []byte(notePrefix)); ok {
		if i := bytes.IndexByte(rest, '"'); i > 0 && bytes.HasPrefix(rest[i+1:], []byte(paramsKey)) {
			return envelope{method: string(rest[:i]), params: rest[i+1+len(paramsKey) : len(rest)-1]}, nil
		}
	}
	return parseEnvelopeSlow(msg)
}

// parseEnvelopeSlow decodes any other layout (error responses, mostly).
func parseEnvelopeSlow(msg []byte) (envelope, error) {
	var m struct {
		ID     *int64          `json:"id"`
		Method *string         `json:"method"`
		Params json.RawMessage `json:"params"`
		Result json.RawMessage `json:"result"`
		Error  *rpcError       `json:"error"`
	}
	if err := json.Unmarshal(msg, &m); err != nil {
		return envelope{}, err
	}
	switch {
	case m.Method != nil:
		return envelope{method: *m.Method, params: m.Params}, nil
	case m.ID != nil && m.Error != nil:
		return envelope{reply: true, id: *m.ID, err: m.Error}, nil
	case m.ID != nil && m.Result != nil:
		return envelope{reply: true, id: *m.ID, result: m.Result}, nil
	}
	return envelope{}, fmt.Errorf("neither a response nor a notification: %.200s", msg)
}
