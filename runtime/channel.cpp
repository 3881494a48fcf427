#include "runtime/channel.hpp"

namespace vgen {
namespace {

class ChannelCategory final : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "vgen.channel"; }
  std::string message(int ev) const override {
    return ev == static_cast<int>(channel_errc::closed) ? "channel closed" : "unknown channel error";
  }
};

}  // namespace

const boost::system::error_category& channel_category() noexcept {
  static const ChannelCategory category;
  return category;
}

}  // namespace vgen
