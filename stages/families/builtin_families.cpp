// The model families vgen ships, by the manifest's `family` name: the one place a new family
// is registered (its code lives in its own folder, stages/<family>/). Programs and tests may
// add more at run time with families().add(name, factory).
#include "stages/families/family.hpp"
#include "stages/families/ltx/ltx_family.hpp"
#include "stages/families/wan/wan_family.hpp"
#include "stages/families/wan/wan_i2v_family.hpp"
#include "stages/families/wan/wan_ti2v_family.hpp"

#include <mutex>

namespace vgen {

void register_builtin_families() {
  static std::once_flag once;
  std::call_once(once, [] {
    families().add("wan2.1-t2v", &make_wan_family);
    families().add("wan2.1-i2v", &make_wan_i2v_family);
    families().add("wan2.1-flf2v", &make_wan_i2v_family);  // and a last frame: manifest image_conditioning.last_image
    families().add("wan2.2-a14b-t2v", &make_wan_family);  // two experts: WanFamily reads manifest `experts`
    families().add("wan2.2-a14b-i2v", &make_wan_i2v_family);  // the two experts with the I2V condition, no image encoder
    families().add("wan2.2-ti2v", &make_wan_ti2v_family);
    families().add("ltx-video", &make_ltx_family);
  });
}

}  // namespace vgen
