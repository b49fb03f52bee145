//go:build !unix

package api

// fdLimit is 0: no limit of file descriptors is known (Windows has none per
// process that an API connection could exhaust before memory).
func fdLimit() uint64 { return 0 }
