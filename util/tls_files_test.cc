#include "util/tls_files.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/match.h"

namespace zpipe::util {
namespace {

// Messages as gRPC words them (UNAVAILABLE for all of them), from real runs.
TEST(LooksLikeTlsFailureTest, TlsHandshakesAndCertificatesAreTls) {
  EXPECT_TRUE(LooksLikeTlsFailure(
      "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:7000: Ssl "
      "handshake failed: SSL_ERROR_SSL: error:0A00010B:SSL routines::wrong version number"));
  EXPECT_TRUE(LooksLikeTlsFailure("Handshake failed"));
  EXPECT_TRUE(
      LooksLikeTlsFailure("CERTIFICATE_VERIFY_FAILED: unable to get local issuer certificate"));
  // A plaintext client at a TLS port: the server closes the connection while it connects.
  EXPECT_TRUE(LooksLikeTlsFailure(
      "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:7000: Socket "
      "closed"));
}

TEST(LooksLikeTlsFailureTest, ACoordinatorThatIsDownOrRestartingIsNotTls) {
  EXPECT_FALSE(LooksLikeTlsFailure(
      "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:7000: Failed to "
      "connect to remote host: Connection refused"));
  EXPECT_FALSE(LooksLikeTlsFailure(
      "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:7000: tcp "
      "handshaker shutdown"));
  EXPECT_FALSE(LooksLikeTlsFailure("Socket closed"));  // a session that ended, not a connect
}

}  // namespace
}  // namespace zpipe::util

namespace zpipe::util {
namespace {

TEST(PlaintextTokenTest, LoopbackTargetsStayOnThisMachine) {
  for (const char* t : {"localhost:50051", "127.0.0.1:1", "127.9.9.9:80", "[::1]:50051",
                        "ipv4:127.0.0.1:5", "unix:/tmp/zpipe.sock", "dns:///localhost:1"}) {
    EXPECT_TRUE(IsLoopbackTarget(t)) << t;
  }
  for (const char* t : {"zpipe-coordinator:50051", "10.0.0.7:50051", "[2001:db8::1]:50051",
                        "128.0.0.1:1", "localhost.evil.example:1"}) {
    EXPECT_FALSE(IsLoopbackTarget(t)) << t;
  }
}

TEST(PlaintextTokenTest, WarnsOrRefusesOnlyForATokenInPlaintextToAnotherMachine) {
  EXPECT_EQ(PlaintextTokenProblem("zpipe", "localhost:1", true, false, true, "--tls-ca"), "");
  EXPECT_EQ(PlaintextTokenProblem("zpipe", "10.0.0.7:1", false, false, true, "--tls-ca"), "");
  EXPECT_EQ(PlaintextTokenProblem("zpipe", "10.0.0.7:1", true, true, true, "--tls-ca"), "");
  const std::string warning =
      PlaintextTokenProblem("zpipe", "10.0.0.7:1", true, false, false, "--tls-ca");
  EXPECT_TRUE(absl::StartsWith(warning, "zpipe: warning: sending a token to 10.0.0.7:1 without "
                                        "TLS"))
      << warning;
  const std::string error =
      PlaintextTokenProblem("zpipe-worker", "10.0.0.7:1", true, false, true, "--tls-ca");
  EXPECT_TRUE(absl::StartsWith(error, "zpipe-worker: refusing to send a token to 10.0.0.7:1"))
      << error;
  EXPECT_NE(error.find("--tls-ca FILE"), std::string::npos) << error;
}

}  // namespace
}  // namespace zpipe::util
