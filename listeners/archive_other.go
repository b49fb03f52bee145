//go:build !linux

package listeners

// moveNoReplace moves src to dest, failing with fs.ErrExist if dest exists.
func moveNoReplace(src, dest string) error { return linkThenRemove(src, dest) }
