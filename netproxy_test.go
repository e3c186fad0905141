package main

// Tests of the managed network proxy (docs/network.md): its params as the reference decodes
// them, its policy table, and the proxy itself with real sockets in a network namespace the
// test makes, with test hosts on documentation addresses only.

import (
	"encoding/json"
	"testing"
)

// TestNetProxyParamsVectors decodes testdata/netproxy/params.txt's values as process/start
// would, and compares each answer with the reference's.
func TestNetProxyParamsVectors(t *testing.T) {
	type startNetFields struct {
		NetworkProxy   *networkProxyParams   `json:"networkProxy,omitempty"`
		ManagedNetwork *managedNetworkParams `json:"managedNetwork,omitempty"`
	}
	for _, c := range readVectors(t, "testdata/netproxy/params.txt") {
		c.only(t, "name", "networkProxy", "managedNetwork", "result", "error")
		key, val := "networkProxy", c.fields["networkProxy"]
		if v, ok := c.fields["managedNetwork"]; ok {
			key, val = "managedNetwork", v
		}
		raw, _ := json.Marshal(map[string]json.RawMessage{key: json.RawMessage(val)})
		var p startNetFields
		err := decodeParams(raw, "ExecParams", &p)
		var rerr *rpcError
		res := json.RawMessage("ok")
		if err != nil {
			rerr = toRPCErrorForTest(err)
			res = nil
		}
		c.checkCall(t, c.name(), res, rerr)
	}
}

func toRPCErrorForTest(err error) *rpcError {
	if re, ok := err.(*rpcError); ok {
		return re
	}
	return &rpcError{Code: -1, Message: err.Error()}
}
