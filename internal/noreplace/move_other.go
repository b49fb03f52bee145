//go:build !linux

package noreplace

// Move moves src to dest, failing with fs.ErrExist if dest exists.
func Move(src, dest string) error { return linkThenRemove(src, dest) }
