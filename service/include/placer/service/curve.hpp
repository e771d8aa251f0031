#pragma once
// CurveZMQ keys for the service: generation, certificate files in ZeroMQ's
// format (the one czmq's zcert writes and reads: a `curve` section with
// Z85 `public-key` and, in the secret file, `secret-key`), the allow list
// a server reads from a directory of public certificates, and the rule
// for which endpoints a server without keys may bind.
//
//   placer keygen --out keys/ --name server   -> keys/server.key, keys/server.key_secret
//   placer serve --curve-secret keys/server.key_secret --allow-keys clients/
//   placer client --server-key keys/server.key --client-cert keys/alice.key_secret ...

#include <string>
#include <vector>

namespace placer::service {

/// Z85 text, 40 characters each; `secret_key` is empty for a public certificate.
struct curve_keypair {
  std::string public_key;
  std::string secret_key;
};

/// A fresh key pair (zmq_curve_keypair). Throws std::runtime_error when
/// libzmq was built without CURVE.
curve_keypair curve_generate();

/// Writes `<path>` (public key only, mode 0644) and `<path>_secret` (both
/// keys, mode 0600), as zcert does. Throws std::runtime_error on I/O errors.
void write_certificates(std::string const& path, curve_keypair const& k);

/// Reads a public or secret certificate. Throws std::runtime_error naming
/// the file when it cannot be read or holds no valid 40-character key.
curve_keypair read_certificate(std::string const& path);

/// The public keys of every `*.key` certificate in `dir` (secret files are
/// skipped). Throws when the directory cannot be read or holds none.
std::vector<std::string> read_allowed_keys(std::string const& dir);

/// Whether a server may bind `endpoint` without authentication: ipc://,
/// inproc://, and tcp:// on 127.0.0.0/8, localhost or [::1].
bool loopback_endpoint(std::string const& endpoint);

}  // namespace placer::service
