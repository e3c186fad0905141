package main

// process/start's managed network proxy (docs/network.md §6): what a start asks for is
// checked here. The proxy itself is netproxy*.go.

// checkNetworkProxyEnabled refuses a networkProxy whose proxy is disabled, as the reference
// does before anything else of the start is checked: an executor-local launch is asked for,
// and there would be nothing to launch.
func checkNetworkProxyEnabled(np *networkProxyParams) error {
	if np != nil && !np.Proxy.Enabled {
		return errInvalidParams("invalid network proxy config: executor-local network proxy launch requires an enabled proxy")
	}
	return nil
}
