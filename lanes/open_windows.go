//go:build windows

package lanes

// noBlockNoFollow: Windows has neither FIFOs at a path nor these flags;
// sameContent's Lstat refuses a link there.
const noBlockNoFollow = 0
