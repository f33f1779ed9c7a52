// nansense::serve: builds the web server and attaches it to the session.
// It lives with the server so that the session never includes server code.
#include <iostream>

#include "nansense/session.h"
#include "server/server.h"
#include "session/session_port.h"

namespace nansense {

bool serve(Session& session, ServeOptions options) {
  detail::SessionPort* port = detail::port_of(session);
  if (!port) return false;
  // A distributed run's follower: rank 0 serves for every rank.
  if (!port->unserved_reason().empty()) return false;
  if (port->attached()) {
    std::cerr << "[nansense] the UI is already served at " << port->url() << "\n";
    return true;
  }
  port->set_display_options(options);
  auto server = std::make_unique<server::Server>(*port);
  if (!server->start(options)) {
    // Nothing could resume a pause without the UI: train on instead.
    if (port->state() == RunState::kRunning) port->detach();
    return false;
  }
  port->attach(std::move(server));
  return true;
}

}  // namespace nansense
