package encode

// PID is the encoder's ffmpeg process, for tests that stop it to hold chunks in the queue.
func PID(e *MP4Encoder) int { return e.cmd.Process.Pid }
