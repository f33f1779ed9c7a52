// A text message from a page on the push channel (/ws): the channel's own
// message handler, as the transport calls it for a peer it accepted. The
// peer here is the server's side of a socket kept in memory; what the
// channel sends it (the status on connect, refusals) is checked like any
// reply.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "fuzz/served_session.h"
#include "server/http/push_channel.h"

using namespace nansense;

namespace {

class InMemoryPeer : public server::WebSocketPeer {
 public:
  void send(std::string text) override { fuzz::check_text(text, "push channel text frame"); }
  void send_binary(std::string) override {}
  bool is_open() const override { return true; }
};

server::WebSocketMessageHandler& handler() {
  static auto* push = new server::PushChannel(fuzz::served_server().controller());
  static auto* peer = new std::shared_ptr<InMemoryPeer>(std::make_shared<InMemoryPeer>());
  static auto* on_message = new server::WebSocketMessageHandler(push->add(*peer));
  return *on_message;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  handler();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > server::WebSocketPeer::kMaxIncomingMessage) return 0;  // the transport closes the socket first
  handler()(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
